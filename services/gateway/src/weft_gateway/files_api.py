"""Session files of the public API (``/api/v1/sessions/{id}/files``): attachments uploaded
into the session's sandbox (``/workspace/input/<name>``, what ``read_file
attachment://<name>`` and commands read) and its files listed and downloaded (the
deliverables under ``/workspace/output``). The sandbox service holds the files; the
gateway checks the caller owns the session (memory: 404 for another tenant's or user's),
the name, the size and the type first."""

# No ``from __future__ import annotations``: FastAPI must see the route annotations.

import mimetypes
from typing import Annotated, Any, Literal
from urllib.parse import quote

from fastapi import APIRouter, Depends, File, HTTPException, Path, Query, Response, UploadFile
from fastapi.exceptions import RequestValidationError
from weft_contracts.files import attachment_name_problem, file_path_problem

from weft_gateway.auth import ApiKeyAuth, Principal
from weft_gateway.clients import ServiceClient, SessionsClient

Id = Annotated[str, Path(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.:-]+$")]
READ_CHUNK = 1024 * 1024


class SandboxFilesClient(ServiceClient):
    """The sandbox's internal files routes."""

    async def upload(self, who: Principal, session_id: str, name: str, data: bytes) -> Any:
        return await self.call(
            "PUT", f"/internal/sessions/{session_id}/files/input/{quote(name, safe='')}",
            params=_caller(who), content=data,
            headers={"Content-Type": "application/octet-stream"},
        )  # fmt: skip

    async def list_files(self, who: Principal, session_id: str, folder: str) -> Any:
        return await self.call(
            "GET", f"/internal/sessions/{session_id}/files",
            params=_caller(who) | {"dir": folder},
        )  # fmt: skip

    async def download(self, who: Principal, session_id: str, path: str) -> bytes:
        resp = await self.send(
            "GET",
            f"/internal/sessions/{session_id}/files/{quote(path)}",
            params=_caller(who),
        )
        return resp.content


def _caller(who: Principal) -> dict[str, str]:
    return {"tenant_id": who.tenant_id, "user_id": who.user_id}


def files_router(
    memory: SessionsClient,
    sandbox: SandboxFilesClient,
    auth: ApiKeyAuth,
    *,
    max_bytes: int,
    types: list[str],
) -> APIRouter:
    """Upload, list and download routes under ``/api/v1``."""
    router = APIRouter(prefix="/api/v1", tags=["files"])
    Who = Annotated[Principal, Depends(auth)]
    suffixes = sorted({t.lower().lstrip(".") for t in types})

    @router.post("/sessions/{session_id}/files", status_code=201)
    async def upload_file(
        who: Who, session_id: Id, file: UploadFile = File(description="The attachment.")
    ) -> Any:
        """Store an attachment as ``/workspace/input/<file name>`` (replacing one of that
        name); 413 over the size limit, 415 for a type not allowed, 422 for a bad name."""
        name = file.filename or ""
        problem = attachment_name_problem(name)
        if problem:
            raise invalid(["body", "file", "filename"], problem)
        suffix = name.rsplit(".", 1)[-1].lower() if "." in name else ""
        if suffix not in suffixes:
            raise HTTPException(
                415, f"file type {('.' + suffix) if suffix else '(none)'} of {name!r} is not "
                f"allowed; allowed: {', '.join(suffixes)}",
            )  # fmt: skip
        await memory.get_session(who.tenant_id, who.user_id, session_id)
        data = await _read_capped(file, max_bytes)
        return await sandbox.upload(who, session_id, name, data)

    @router.get("/sessions/{session_id}/files")
    async def list_files(
        who: Who,
        session_id: Id,
        folder: Literal["output", "input"] = Query(default="output", alias="dir"),
    ) -> Any:
        """Files of ``/workspace/output`` (default) or ``/workspace/input``: name, path,
        size and modification time, from the session's newest checkpoint."""
        await memory.get_session(who.tenant_id, who.user_id, session_id)
        return await sandbox.list_files(who, session_id, folder)

    @router.get("/sessions/{session_id}/files/{path:path}")
    async def download_file(who: Who, session_id: Id, path: str) -> Response:
        """One file, ``path`` relative to ``/workspace`` (``output/report.md``)."""
        problem = file_path_problem(path)  # before a client normalises ``..`` away
        if problem:
            raise invalid(["path", "path"], problem)
        await memory.get_session(who.tenant_id, who.user_id, session_id)
        data = await sandbox.download(who, session_id, path)
        name = path.rsplit("/", 1)[-1]
        media = mimetypes.guess_type(name)[0] or "application/octet-stream"
        disposition = f"attachment; filename*=UTF-8''{quote(name, safe='')}"
        return Response(
            content=data, media_type=media,
            headers={"Content-Disposition": disposition, "X-Content-Type-Options": "nosniff"},
        )  # fmt: skip

    return router


async def _read_capped(file: UploadFile, max_bytes: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while chunk := await file.read(READ_CHUNK):
        size += len(chunk)
        if size > max_bytes:
            raise HTTPException(413, f"the file is larger than the {max_bytes}-byte limit")
        chunks.append(chunk)
    return b"".join(chunks)


def invalid(loc: list[str], problem: str) -> RequestValidationError:
    """A 422 shaped as every other validation error of the API (``detail`` a list)."""
    return RequestValidationError([{"type": "value_error", "loc": loc, "msg": problem}])
