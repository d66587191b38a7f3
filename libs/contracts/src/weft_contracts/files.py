"""Session files shared by the gateway, the sandbox and the engine: which attachment
names are safe, and the public path a session's file is downloaded from."""

from __future__ import annotations

from urllib.parse import quote

NAME_MAX_BYTES = 255
"""A file name's longest UTF-8 form (what Linux file systems take)."""


def attachment_name_problem(name: str) -> str | None:
    """Why ``name`` cannot be an attachment's file name, or None when it can: one plain
    name (``/workspace/input/<name>``), never a path, a NUL, a control character, ``.``
    or ``..``, nor blank."""
    if not name or not name.strip():
        return "the file name is empty"
    if len(name.encode()) > NAME_MAX_BYTES:
        return f"the file name is longer than {NAME_MAX_BYTES} bytes"
    if "/" in name or "\\" in name:
        return "the file name contains a path separator"
    if "\x00" in name:
        return "the file name contains a NUL byte"
    if any(ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 for c in name):
        return "the file name contains a control character"
    if name in (".", ".."):
        return f"{name!r} is not a file name"
    if name != name.strip():
        return "the file name starts or ends with white space"
    return None


def file_path_problem(path: str) -> str | None:
    """Why ``path`` cannot name a session's file (relative to ``/workspace``, such as
    ``output/report.md``), or None: never absolute, never ``..``, ``.`` or an empty part,
    never a NUL or a control character."""
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in path):
        return "the path contains a NUL byte or a control character"
    if path.startswith("/"):
        return "the path is relative to /workspace (input/... or output/...)"
    if any(part in ("", ".", "..") for part in path.split("/")):
        return "the path may not contain '..', '.' or empty parts"
    return None


def download_path(session_id: str, path: str) -> str:
    """The public API path that downloads ``path`` (relative to ``/workspace``, such as
    ``output/report.md``) of the session's workspace."""
    return f"/api/v1/sessions/{quote(session_id, safe='')}/files/{quote(path)}"
