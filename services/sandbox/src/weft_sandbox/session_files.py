"""A session's files from outside a turn: attachments put into ``/workspace/input`` and
the workspace's files listed and read (deliverables under ``/workspace/output``).

Each works on the session's workspace as its newest checkpoint has it (``SandboxHost``
restores it first on a replica that holds none or an older one). An upload is a change:
it holds the session's lock across replicas, like a write call, and is checkpointed, so
the next call on any replica sees it and no two changes create the same checkpoint.
"""

from __future__ import annotations

import asyncio
import errno
import os
import secrets
import stat
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from weft_contracts.files import attachment_name_problem, file_path_problem

from weft_sandbox.worker import SandboxHost
from weft_sandbox.workspace import INPUT, OUTPUT, PathRefused, Workspace

UPLOAD_REQUEST = "upload"
"""The ``request_id`` of an upload's checkpoint (it belongs to no turn)."""
LISTED_DIRS = (INPUT, OUTPUT)
LIST_LIMIT = 1000


class FileRefused(ValueError):
    """A request the files API answers with ``status`` and the reason."""

    def __init__(self, status: int, reason: str):
        super().__init__(reason)
        self.status = status
        self.reason = reason


@dataclass(frozen=True)
class Stored:
    """An attachment in place."""

    name: str
    path: str
    size: int
    checkpoint: int | None


@dataclass(frozen=True)
class Listed:
    """One regular file of a listed folder."""

    name: str
    """Relative to the folder (``sub/report.md``)."""
    path: str
    """Relative to ``/workspace`` (``output/sub/report.md``), what the download takes."""
    size: int
    modified_at: str


class SessionFiles:
    """Uploads, listings and downloads over the replica's workspaces."""

    def __init__(self, host: SandboxHost):
        self._host = host

    async def upload(self, tenant_id: str, session_id: str, name: str, data: bytes) -> Stored:
        """Put ``data`` at ``/workspace/input/<name>`` (replacing a file of that name) and
        checkpoint it."""
        problem = attachment_name_problem(name)
        if problem:
            raise FileRefused(422, problem)
        async with self._host.hold(tenant_id, session_id) as space:
            target = space.work / INPUT / name
            try:
                await asyncio.to_thread(_write_attachment, target, data)
            except OSError as exc:
                target.unlink(missing_ok=True)
                if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                    raise FileRefused(413, _full(self._host, len(data))) from None
                raise
            if self._host.pool.over_cap(space) is not None:
                target.unlink(missing_ok=True)
                raise FileRefused(413, _full(self._host, len(data)))
            if (over := await self._host.keep_within_caps(space)) is not None:
                raise FileRefused(413, f"no room for {len(data)} bytes: {over.reason()}")
            done = await self._host.checkpoints.commit(
                space, request_id=UPLOAD_REQUEST, call_id=f"upload-{secrets.token_hex(8)}"
            )
        return Stored(name, f"{INPUT}/{name}", len(data), done.seq if done else None)

    async def list(self, tenant_id: str, session_id: str, folder: str) -> list[Listed]:
        """The regular files under ``/workspace/<folder>`` (input or output), sorted."""
        if folder not in LISTED_DIRS:
            raise FileRefused(422, f"dir must be one of {', '.join(LISTED_DIRS)}")
        async with self._host.hold(tenant_id, session_id, change=False) as space:
            return await asyncio.to_thread(_list, space, folder)

    async def read(self, tenant_id: str, session_id: str, path: str) -> tuple[str, bytes]:
        """The content of ``path`` (relative to ``/workspace``, under input or output) and
        its name; 404 for a path that is no regular file inside its folder."""
        parts = _relative_parts(path)
        async with self._host.hold(tenant_id, session_id, change=False) as space:
            data = await asyncio.to_thread(_read, space, parts, path)
        return parts[-1], data


def _full(host: SandboxHost, size: int) -> str:
    return (
        f"the session's workspace has no room for {size} bytes (cap {host.pool.size_bytes} bytes)"
    )


def _write_attachment(target: Path, data: bytes) -> None:
    """Written by the service, mode 0644: commands read it, never change it (the folder
    is read-only for them); a link planted there is replaced, never followed."""
    if target.is_symlink() or (target.exists() and not target.is_file()):
        raise FileRefused(409, f"{target.name!r} exists in /workspace/input and is no file")
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    os.chmod(target, 0o644)


def _relative_parts(path: str) -> list[str]:
    """``path`` as folder-relative parts, refusing every escape (422 with the reason)."""
    problem = file_path_problem(path)
    if problem:
        raise FileRefused(422, problem)
    parts = path.split("/")
    if len(parts) < 2 or parts[0] not in LISTED_DIRS:
        raise FileRefused(404, f"no file {path!r}: only input/... and output/... are served")
    return parts


def _read(space: Workspace, parts: list[str], shown: str) -> bytes:
    missing = FileRefused(404, f"no file {shown!r} in the session's workspace")
    try:
        host = space.host_path("/".join(parts))
    except PathRefused:
        raise missing from None  # a link pointing out of the workspace
    folder = (space.work / parts[0]).resolve()
    if folder not in host.parents:
        raise missing  # a link from output into another folder
    try:
        fd = os.open(host, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        raise missing from None
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            raise missing
        return handle.read()


def _list(space: Workspace, folder: str) -> list[Listed]:
    top = space.work / folder
    found: list[Listed] = []
    for directory, dirs, files in os.walk(top):  # never follows links to folders
        dirs.sort()
        for name in sorted(files):
            full = Path(directory) / name
            info = full.lstat()
            if not stat.S_ISREG(info.st_mode):
                continue  # links are not served
            inside = full.relative_to(top).as_posix()
            modified = datetime.fromtimestamp(info.st_mtime, UTC).isoformat()
            found.append(Listed(inside, f"{folder}/{inside}", info.st_size, modified))
            if len(found) >= LIST_LIMIT:
                return found
    return found
