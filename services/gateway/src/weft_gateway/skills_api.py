"""Skill routes of the public API (``/api/v1/skills``, SPEC S-04): install a package (a
zip body, or JSON files), list, read and delete the tenant's skills. agent-config owns
the skills: every route is proxied to its ``/internal/skills`` with the caller's request
credential, which names the caller's tenant, so another tenant's skill is 404, like a
missing one. agent-config checks the package (413, 415, 422 with the reason); the gateway
only refuses what it would not forward: another content type, a body too large."""

from typing import Annotated, Any
from urllib.parse import quote

from fastapi import APIRouter, Depends, HTTPException, Path, Query, Request, Response

from weft_gateway.auth import ApiKeyAuth, Principal
from weft_gateway.clients import AgentConfigClient

MAX_UPLOAD_BYTES = 8 * 1024 * 1024
"""The largest body forwarded: a JSON upload of agent-config's largest package (4 MiB of
files, base64 and syntax); agent-config checks the exact limits."""
UPLOAD_TYPES = (
    "application/zip", "application/x-zip-compressed", "application/octet-stream",
    "application/json",
)  # fmt: skip
NAME_MAX = 64


def skills_router(agents: AgentConfigClient, auth: ApiKeyAuth) -> APIRouter:
    """Routes under ``/api/v1/skills``."""
    router = APIRouter(prefix="/api/v1/skills", tags=["skills"])
    Who = Annotated[Principal, Depends(auth)]
    Name = Annotated[str, Path(min_length=1, max_length=NAME_MAX, pattern=r"^[a-z0-9_-]+$")]

    def _tenant(who: Principal) -> dict[str, Any]:
        return {"tenant_id": who.tenant_id}

    @router.post("", status_code=201)
    async def install(request: Request, who: Who, replace: bool = Query(False)) -> Any:
        kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if kind not in UPLOAD_TYPES:
            raise HTTPException(
                415, "send the package as application/zip or as application/json {files: [...]}"
            )
        body = await _read_capped(request, MAX_UPLOAD_BYTES)
        return await agents.call(
            "POST", "/internal/skills", params={**_tenant(who), "replace": replace},
            content=body, headers={"content-type": kind},
        )  # fmt: skip

    @router.get("")
    async def list_skills(who: Who) -> Any:
        return await agents.call("GET", "/internal/skills", params=_tenant(who))

    @router.get("/{name}")
    async def get_skill(who: Who, name: Name) -> Any:
        return await agents.call("GET", f"/internal/skills/{quote(name)}", params=_tenant(who))

    @router.delete("/{name}", status_code=204)
    async def delete_skill(who: Who, name: Name) -> Response:
        await agents.call("DELETE", f"/internal/skills/{quote(name)}", params=_tenant(who))
        return Response(status_code=204)

    return router


async def _read_capped(request: Request, cap: int) -> bytes:
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > cap:
            raise HTTPException(413, f"the package upload is larger than {cap} bytes")
    return bytes(body)
