"""Skill routes of the public API (``/api/v1/skills``, SPEC S-04): install a package (a
zip body, or JSON files), list, read and delete the tenant's skills. Every route is
scoped to the caller's tenant: another tenant's skill is 404, like a missing one."""

import base64
import binascii
import json
from dataclasses import asdict
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, HTTPException, Path, Query, Request, Response
from pydantic import BaseModel, Field, ValidationError
from weft_storage.agent_config.skill_packages import (
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

from weft_gateway.auth import ApiKeyAuth, Principal

MAX_JSON_BYTES = MAX_PACKAGE_BYTES * 2
"""A JSON upload may carry base64 (4/3 of the bytes) plus its own syntax."""
ZIP_TYPES = ("application/zip", "application/x-zip-compressed", "application/octet-stream")


class SkillFileBody(BaseModel):
    """One file of a JSON upload."""

    path: str = Field(min_length=1, max_length=255)
    content: str
    encoding: Literal["utf-8", "base64"] = "utf-8"
    executable: bool = False


class SkillUpload(BaseModel):
    """Body of ``POST /skills`` as JSON: the package's files, SKILL.md among them."""

    files: list[SkillFileBody] = Field(min_length=1, max_length=MAX_FILES)


def summary_view(summary: SkillSummary) -> dict[str, Any]:
    """A skill as lists show it."""
    view = asdict(summary)
    view["updated_at"] = summary.updated_at.isoformat()
    return view


def skills_router(store: SkillStore, auth: ApiKeyAuth) -> APIRouter:
    """Routes under ``/api/v1/skills``."""
    router = APIRouter(prefix="/api/v1/skills", tags=["skills"])
    Who = Annotated[Principal, Depends(auth)]
    Name = Annotated[str, Path(min_length=1, max_length=NAME_MAX, pattern=r"^[a-z0-9_-]+$")]

    @router.post("", status_code=201)
    async def install(request: Request, who: Who, replace: bool = Query(False)) -> Any:
        package = await _package(request)
        try:
            summary = await store.install(who.tenant_id, package, replace=replace)
        except SkillExists as exc:
            raise HTTPException(409, f"{exc}; delete it first or pass replace=true") from None
        return summary_view(summary)

    @router.get("")
    async def list_skills(who: Who) -> list[dict[str, Any]]:
        return [summary_view(s) for s in await store.list(who.tenant_id)]

    @router.get("/{name}")
    async def get_skill(who: Who, name: Name) -> dict[str, Any]:
        stored = await store.get(who.tenant_id, name)
        if stored is None:
            raise HTTPException(404, f"skill {name!r} not found")
        view = summary_view(stored.summary)
        view["files"] = [
            {"path": f.path, "bytes": len(f.content), "executable": f.executable}
            for f in stored.package.files
        ]
        return view

    @router.delete("/{name}", status_code=204)
    async def delete_skill(who: Who, name: Name) -> Response:
        if not await store.delete(who.tenant_id, name):
            raise HTTPException(404, f"skill {name!r} not found")
        return Response(status_code=204)

    return router


async def _package(request: Request) -> SkillPackage:
    """The uploaded package, validated: 413 when too big, 422 with the reason otherwise."""
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
