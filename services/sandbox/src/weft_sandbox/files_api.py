"""Internal routes of the sandbox: a session's files for the gateway's files API.

Tenant routes (``weft_platform.internal_auth``): the request credential's tenant and user
must be the ones named. The gateway checks that the user owns the session (memory) before
it calls, and so does this route (``owner``: memory, asked with the route's own
credential, finds a live session of that tenant and user), so a credential of one user
never reaches another user's workspace of the tenant;
the workspace is found by tenant and session, so a session id of another tenant names an
empty workspace of the caller's own tenant, never the other's files.
"""

# No ``from __future__ import annotations``: FastAPI reads the route annotations.

from collections.abc import Awaitable, Callable
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Path, Query, Request, Response
from weft_platform.session_owner import OwnerUnknown, SessionOwners

from weft_sandbox.session_files import FileRefused, SessionFiles
from weft_sandbox.session_lock import WorkspaceBusy
from weft_sandbox.workspace_budget import WorkspaceFull

SessionId = Annotated[str, Path(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.:-]+$")]
Caller = Annotated[str, Query(min_length=1, max_length=128)]
NO_SANDBOX = "no sandbox is configured on this deployment (WEFT_SANDBOX_BACKEND=none)"


Owner = Callable[[str | None, str, str, str], Awaitable[bool]]
"""Whether (tenant, user, session) names a live session of that user, for the caller's
``Authorization`` header (first argument)."""


def session_owner(owners: SessionOwners) -> Owner:
    """An :data:`Owner` that asks memory (``weft_platform.session_owner``)."""
    return owners.owns


def files_router(
    files: SessionFiles | None, max_upload_bytes: int, owner: Owner | None = None
) -> APIRouter:
    """``/internal/sessions/{session_id}/files...``; ``owner`` (none: no check, for unit
    tests of the routes alone) refuses another user's session with the 404 of a missing
    one."""
    router = APIRouter(prefix="/internal/sessions/{session_id}/files", tags=["files"])

    async def usable(
        request: Request, tenant_id: str, user_id: str, session_id: str
    ) -> SessionFiles:
        if owner is not None:
            try:
                owned = await owner(
                    request.headers.get("authorization"), tenant_id, user_id, session_id
                )
            except OwnerUnknown as exc:
                raise HTTPException(503, f"{exc}; retry", {"Retry-After": "2"}) from None
            if not owned:
                raise HTTPException(404, f"session {session_id!r} not found")
        if files is None:
            raise HTTPException(409, NO_SANDBOX)
        return files

    @router.put("/input/{name}", status_code=201)
    async def upload(
        request: Request, session_id: SessionId, name: str, tenant_id: Caller, user_id: Caller
    ) -> dict[str, Any]:
        """The raw body becomes ``/workspace/input/<name>``."""
        service = await usable(request, tenant_id, user_id, session_id)
        data = await _body(request, max_upload_bytes)
        with _answered():
            stored = await service.upload(tenant_id, session_id, name, data)
        return {"name": stored.name, "path": stored.path, "size": stored.size,
                "checkpoint": stored.checkpoint}  # fmt: skip

    @router.get("")
    async def list_files(
        request: Request, session_id: SessionId, tenant_id: Caller, user_id: Caller,
        folder: str = Query(default="output", alias="dir"),
    ) -> dict[str, Any]:  # fmt: skip
        service = await usable(request, tenant_id, user_id, session_id)
        with _answered():
            listed = await service.list(tenant_id, session_id, folder)
        items = [
            {"name": f.name, "path": f.path, "size": f.size, "modified_at": f.modified_at}
            for f in listed
        ]
        return {"dir": folder, "files": items}

    @router.get("/{path:path}")
    async def download(
        request: Request, session_id: SessionId, path: str, tenant_id: Caller, user_id: Caller
    ) -> Response:
        service = await usable(request, tenant_id, user_id, session_id)
        with _answered():
            _, data = await service.read(tenant_id, session_id, path)
        return Response(content=data, media_type="application/octet-stream")

    return router


async def _body(request: Request, limit: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise HTTPException(413, f"the file is larger than {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


class _answered:
    """Maps the files' refusals to their HTTP answers."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: object, exc: BaseException | None, tb: object) -> None:
        if isinstance(exc, FileRefused):
            raise HTTPException(exc.status, exc.reason) from None
        if isinstance(exc, WorkspaceFull):
            raise HTTPException(409, f"the session's workspace cannot be opened: {exc}") from None
        if isinstance(exc, WorkspaceBusy):
            raise HTTPException(
                409, "the session's workspace is busy with a tool call; retry", {"Retry-After": "5"}
            ) from None
