"""Skill packages as the sandbox gets them: asked of agent-config, which owns them
(``skill_packages``; docs/architecture.md "Data ownership"), with the tool call's own turn
credential, so agent-config answers for the call's tenant only.

- :meth:`AgentConfigSkills.package` reads the package a turn's agent may use
  (``GET /internal/skills/{name}/package``): agent-config finds the agent as the caller's
  tenant runs it and answers the package of the tenant whose sandbox runs its skills (the
  owner of a shared agent). What comes back is checked again as a package
  (``weft_contracts.skill_packages``) before anything is written to disk.
- :meth:`AgentConfigSkills.install` stores the skill installer's draft
  (``POST /internal/skills`` with the call's session: it replaces only a skill that same
  session installed).
"""

from __future__ import annotations

import base64
import binascii
from typing import Any, Protocol
from urllib.parse import quote

import httpx
from weft_contracts.skill_packages import PackageRejected, SkillFile, SkillPackage, build_package
from weft_platform.internal_auth import bearer
from weft_platform.retry import RetryWindow, request_within
from weft_platform.tracing import service_client


class SkillTaken(ValueError):
    """The tenant has a skill of that name this installation did not create."""


class SkillsUnreachable(RuntimeError):
    """agent-config could not answer; the message is the model's error text."""


class SkillSource(Protocol):
    """Where the sandbox's skills come from."""

    async def package(
        self, credential: str | None, tenant_id: str, agent_id: str, name: str
    ) -> SkillPackage | None:
        """The package of ``name`` for a turn of ``agent_id``; None when there is none
        the agent may use."""

    async def install(
        self, credential: str | None, tenant_id: str, session_id: str, package: SkillPackage
    ) -> dict[str, Any]:
        """Install ``package`` for the installer session; the stored skill's summary."""


class AgentConfigSkills:
    """:class:`SkillSource` over agent-config's internal API."""

    def __init__(
        self,
        base_url: str,
        timeout_s: float = 10.0,
        *,
        retry: RetryWindow | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ):
        self._retry = retry or RetryWindow(window_s=5.0)
        self._http = service_client(base_url, timeout_s, transport=transport)

    async def package(
        self, credential: str | None, tenant_id: str, agent_id: str, name: str
    ) -> SkillPackage | None:
        resp = await self._send(
            "GET", f"/internal/skills/{quote(name, safe='')}/package", credential,
            params={"tenant_id": tenant_id, "agent_id": agent_id},
        )  # fmt: skip
        if resp.status_code == 404:
            return None
        if resp.status_code != 200:
            raise SkillsUnreachable(f"skills cannot be read now (agent-config {resp.status_code})")
        try:
            return _package(resp.json())
        except (PackageRejected, ValueError, KeyError, TypeError, binascii.Error) as exc:
            raise SkillsUnreachable(f"skill {name!r} came back invalid: {exc}") from None

    async def install(
        self, credential: str | None, tenant_id: str, session_id: str, package: SkillPackage
    ) -> dict[str, Any]:
        files = [
            {"path": f.path, "content": base64.b64encode(f.content).decode(),
             "encoding": "base64", "executable": f.executable}
            for f in package.files
        ]  # fmt: skip
        resp = await self._send(
            "POST", "/internal/skills", credential, resend=False,
            params={"tenant_id": tenant_id, "session_id": session_id}, json={"files": files},
        )  # fmt: skip
        if resp.status_code == 409:
            raise SkillTaken(package.name)
        if resp.status_code != 201:
            raise SkillsUnreachable(
                f"the skill could not be installed (agent-config {resp.status_code}: "
                f"{resp.text[:300]})"
            )
        summary: dict[str, Any] = resp.json()
        return summary

    async def _send(
        self, method: str, path: str, credential: str | None, *, resend: bool = True,
        **kwargs: Any,
    ) -> httpx.Response:  # fmt: skip
        try:
            return await request_within(
                self._http, self._retry, method, path, resend=resend,
                headers=bearer(credential), **kwargs,
            )  # fmt: skip
        except httpx.HTTPError as exc:
            raise SkillsUnreachable(
                f"skills cannot be reached now ({type(exc).__name__}); retry"
            ) from exc

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._http.aclose()


def _package(body: Any) -> SkillPackage:
    files = [
        SkillFile(str(f["path"]), base64.b64decode(f["content"], validate=True),
                  bool(f.get("executable", False)))
        for f in body["files"]
    ]  # fmt: skip
    return build_package(files)
