"""Skills, owned by agent-config (``skill_packages``, SPEC S-04): the internal routes the
gateway's ``/api/v1/skills`` proxies to, and the package read of the sandbox.

Tenant routes: the request credential's tenant is the one named (``InternalAuth``), so a
caller reaches its own tenant's skills only; another tenant's skill is 404, like a
missing one.

- ``POST /internal/skills?tenant_id=&replace=[&session_id=]``: install a package (for the
  skill installer's session: replacing only what that session installed; a turn
  credential names only its own session), sent as a zip
  (``application/zip``) or as JSON ``{files: [{path, content, encoding, executable}]}``;
  413 too big, 415 another type, 422 an invalid package, 409 a skill of that name.
- ``GET /internal/skills?tenant_id=``; ``GET`` and ``DELETE /internal/skills/{name}``.
- ``GET /internal/skills/{name}/package?tenant_id=&agent_id=``: the whole package (files
  in base64) for a turn of ``agent_id``. The package is the one of the tenant whose
  sandbox runs the agent's skills, as agent-config finds the agent for the caller's
  tenant (its owner for a shared agent), never a tenant the request names; a skill the
  agent may not use is 404 like a missing one.
"""

# No ``from __future__ import annotations``: FastAPI reads the route annotations.

import base64
import binascii
import json
from dataclasses import asdict
from typing import Annotated, Any, Literal

from fastapi import APIRouter, HTTPException, Path, Query, Request, Response
from pydantic import BaseModel, Field, ValidationError
from weft_contracts.skill_packages import (
    MAX_ARCHIVE_BYTES,
    MAX_FILES,
    MAX_PACKAGE_BYTES,
    NAME_MAX,
    PackageRejected,
    PackageTooLarge,
    SkillFile,
    SkillPackage,
    build_package,
    package_from_zip,
)
from weft_storage.agent_config.skills import SkillExists, SkillStore, SkillSummary

from weft_agent_config.resolver import (
    AgentNotFound,
    AgentResolver,
    AgentUnavailable,
    SharedAgentDisabled,
)

MAX_JSON_BYTES = MAX_PACKAGE_BYTES * 2
"""A JSON upload may carry base64 (4/3 of the bytes) plus its own syntax."""
ZIP_TYPES = ("application/zip", "application/x-zip-compressed", "application/octet-stream")
Tenant = Annotated[str, Query(min_length=1, max_length=128)]
Name = Annotated[str, Path(min_length=1, max_length=NAME_MAX, pattern=r"^[a-z0-9_-]+$")]


class SkillFileBody(BaseModel):
    """One file of a JSON upload."""

    path: str = Field(min_length=1, max_length=255)
    content: str
    encoding: Literal["utf-8", "base64"] = "utf-8"
    executable: bool = False


class SkillUpload(BaseModel):
    """A JSON upload: the package's files, SKILL.md among them."""

    files: list[SkillFileBody] = Field(min_length=1, max_length=MAX_FILES)


def summary_view(summary: SkillSummary) -> dict[str, Any]:
    """A skill as lists show it."""
    view = asdict(summary)
    view["updated_at"] = summary.updated_at.isoformat()
    return view


def package_json(package: SkillPackage) -> dict[str, Any]:
    """A package as the package route answers it (the JSON upload's shape)."""
    return {
        "name": package.name,
        "digest": package.digest,
        "files": [
            {"path": f.path, "content": base64.b64encode(f.content).decode(),
             "encoding": "base64", "executable": f.executable}
            for f in package.files
        ],
    }  # fmt: skip


def skills_router(store: SkillStore, resolver: AgentResolver) -> APIRouter:
    """The skill routes under ``/internal/skills``."""
    router = APIRouter(prefix="/internal/skills", tags=["skills"])

    @router.post("", status_code=201)
    async def install(
        request: Request,
        tenant_id: Tenant,
        replace: bool = False,
        session_id: Annotated[str | None, Query(min_length=1, max_length=128)] = None,
    ) -> Any:
        """``session_id``: the skill installer's session (the sandbox's call, with that
        session's turn credential, which names no other: ``InternalAuth``): it replaces
        only a skill that session installed."""
        package = await read_package(request)
        try:
            summary = await store.install(
                tenant_id, package, replace=replace, installer_session=session_id
            )
        except SkillExists as exc:
            raise HTTPException(409, f"{exc}; delete it first or pass replace=true") from None
        return summary_view(summary)

    @router.get("")
    async def list_skills(tenant_id: Tenant) -> list[dict[str, Any]]:
        return [summary_view(s) for s in await store.list(tenant_id)]

    @router.get("/{name}")
    async def get_skill(tenant_id: Tenant, name: Name) -> dict[str, Any]:
        stored = await store.get(tenant_id, name)
        if stored is None:
            raise HTTPException(404, f"skill {name!r} not found")
        view = summary_view(stored.summary)
        view["files"] = [
            {"path": f.path, "bytes": len(f.content), "executable": f.executable}
            for f in stored.package.files
        ]
        return view

    @router.get("/{name}/package")
    async def get_package(
        tenant_id: Tenant,
        name: Name,
        agent_id: Annotated[str, Query(min_length=1, max_length=128)],
    ) -> dict[str, Any]:
        missing = HTTPException(404, f"skill {name!r} not found")
        try:
            found = await resolver.find(tenant_id, agent_id)
        except (AgentNotFound, AgentUnavailable, SharedAgentDisabled):
            raise missing from None
        agent = found.definition
        if agent.skills_selection_mode == "none" or (
            agent.skills_selection_mode == "selected" and name not in agent.selected_skills
        ):
            raise missing
        stored = await store.get(found.owner_tenant_id or tenant_id, name)
        if stored is None:
            raise missing
        return package_json(stored.package)

    @router.delete("/{name}", status_code=204)
    async def delete_skill(tenant_id: Tenant, name: Name) -> Response:
        if not await store.delete(tenant_id, name):
            raise HTTPException(404, f"skill {name!r} not found")
        return Response(status_code=204)

    return router


async def read_package(request: Request) -> SkillPackage:
    """The uploaded package, validated: 413 when too big, 415 another type, 422 with the
    reason otherwise."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind not in (*ZIP_TYPES, "application/json"):
        raise HTTPException(
            415, "send the package as application/zip or as application/json {files: [...]}"
        )
    is_zip = kind in ZIP_TYPES
    body = await _read_capped(request, MAX_ARCHIVE_BYTES if is_zip else MAX_JSON_BYTES)
    try:
        return package_from_zip(body) if is_zip else build_package(_json_files(body))
    except PackageTooLarge as exc:
        raise HTTPException(413, str(exc)) from None
    except PackageRejected as exc:
        raise HTTPException(422, f"invalid skill package: {exc}") from None


async def _read_capped(request: Request, cap: int) -> bytes:
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > cap:
            raise HTTPException(413, f"the package upload is larger than {cap} bytes")
    return bytes(body)


def _json_files(body: bytes) -> list[SkillFile]:
    try:
        upload = SkillUpload.model_validate(json.loads(body))
    except (ValueError, ValidationError) as exc:
        detail = exc.errors(include_url=False) if isinstance(exc, ValidationError) else str(exc)
        raise PackageRejected(f"the JSON body is not {{files: [...]}}: {detail}") from None
    files = []
    for f in upload.files:
        try:
            content = (
                base64.b64decode(f.content, validate=True)
                if f.encoding == "base64"
                else f.content.encode()
            )
        except (binascii.Error, ValueError):
            raise PackageRejected(f"{f.path[:80]!r}: content is not valid base64") from None
        files.append(SkillFile(f.path, content, f.executable))
    return files
