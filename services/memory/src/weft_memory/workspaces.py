"""The sandbox's side of a fork or rollback (SPEC S-03, M-07): the workspace follows the
history, and its checkpoints are the sandbox's (``sandbox_checkpoints``), so memory asks
the sandbox over internal HTTP (``POST /internal/checkpoints/fork`` and ``/rollback``)
with its own service credential (issuer ``memory``, scope ``sandbox:checkpoints``).

Order (docs/memory.md "Fork", "Deleting messages"): memory first writes its rows in its
open transaction, then asks the sandbox, then commits. A failure of the sandbox rolls
memory's transaction back (the request answers 503 and nothing a user sees changed); a
failure of memory's commit after the sandbox answered leaves what the repeat of the same
request completes: a fork's copied checkpoints under a session id nobody holds (never
visible), or a workspace already rolled back under the history the repeat then deletes.
Both sandbox routes are idempotent for that repeat.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Any, Protocol

import httpx
from fastapi import HTTPException
from weft_platform.internal_auth import bearer
from weft_platform.retry import RetryWindow, request_within
from weft_platform.tracing import service_client

SCOPE = "sandbox:checkpoints"


class Workspaces(Protocol):
    """What memory asks of the sandbox's checkpoints."""

    async def fork(
        self, tenant_id: str, source_session_id: str, target_session_id: str,
        turns: Mapping[str, str],
    ) -> int:  # fmt: skip
        """Copy the source's checkpoints of ``turns`` (source -> fork request id) to the
        target; the rows copied."""

    async def roll_back(self, tenant_id: str, session_id: str, remaining: Collection[str]) -> None:
        """Point the workspace at the last checkpoint of the ``remaining`` turns."""


class SandboxWorkspaces:
    """:class:`Workspaces` over the sandbox's internal API; any failure is a 503 with
    ``Retry-After`` (the caller's transaction rolls back with it)."""

    def __init__(
        self,
        base_url: str,
        credential: Callable[[], str],
        timeout_s: float = 10.0,
        *,
        retry: RetryWindow | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ):
        self._credential = credential
        self._retry = retry or RetryWindow(window_s=5.0)
        self._http = service_client(base_url, timeout_s, transport=transport)

    async def fork(
        self, tenant_id: str, source_session_id: str, target_session_id: str,
        turns: Mapping[str, str],
    ) -> int:  # fmt: skip
        body = {
            "tenant_id": tenant_id, "source_session_id": source_session_id,
            "target_session_id": target_session_id, "turns": dict(turns),
        }  # fmt: skip
        answer = await self._post("/internal/checkpoints/fork", body)
        return int(answer["copied"])

    async def roll_back(self, tenant_id: str, session_id: str, remaining: Collection[str]) -> None:
        body = {"tenant_id": tenant_id, "session_id": session_id, "remaining": sorted(remaining)}
        await self._post("/internal/checkpoints/rollback", body)

    async def _post(self, path: str, body: dict[str, Any]) -> Any:
        try:
            resp = await request_within(
                self._http, self._retry, "POST", path, resend=True, json=body,
                headers=bearer(self._credential()),
            )  # fmt: skip
        except httpx.HTTPError as exc:
            raise _unavailable(f"unreachable ({type(exc).__name__})") from exc
        if resp.status_code != 200:
            raise _unavailable(f"answered {resp.status_code}: {resp.text[:200]}")
        return resp.json()

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._http.aclose()


def _unavailable(why: str) -> HTTPException:
    return HTTPException(
        503, f"the session's workspace (sandbox) {why}; nothing was changed, retry",
        {"Retry-After": "2"},
    )  # fmt: skip
