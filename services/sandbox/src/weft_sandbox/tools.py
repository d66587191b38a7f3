"""The sandbox tools (SPEC T-14..T-16) over the session's workspace.

The worker holds the session's workspace (locked, fresh) while a tool runs; a tool finds
it through :meth:`WorkspaceHost.held`. Identity comes from the call's envelope (tenant and
session), never from arguments (S-01). Every refusal is a tool error the model reads.
"""

from __future__ import annotations

import asyncio
import itertools
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol

from weft_platform.web_snapshots import SnapshotStore
from weft_tool_catalog import ToolInvocation, ToolOutcome, ToolSpec
from weft_tool_catalog.registry import ToolRegistry
from weft_tool_catalog.sandbox_specs import (
    EDIT_SANDBOX_FILE,
    LIST_SANDBOX_FILES,
    READ_FILE,
    READ_WEB_MAX_BYTES,
    SHELL_EXEC,
    WRITE_MAX_BYTES,
    WRITE_SANDBOX_FILE,
    EditSandboxFileArguments,
    ListSandboxFilesArguments,
    ReadFileArguments,
    SandboxEdit,
    ShellExecArguments,
    WriteSandboxFileArguments,
)

from weft_sandbox.backend import SandboxBackend
from weft_sandbox.local_backend import Command, CommandResult, check_env
from weft_sandbox.skills import (
    SKILL_DIR_ENV,
    SkillLibrary,
    SkillRef,
    SkillUnavailable,
    mount_point,
    skill_file_text,
)
from weft_sandbox.workspace import INPUT, WORKSPACE, PathRefused, Workspace

NO_SKILLS = "skills need a sandbox, and none is configured on this deployment"
SKILLS_NOT_ON_BACKEND = (
    "skill scripts cannot run on this deployment's sandbox backend (kubernetes) yet; "
    "read the skill with read_file skill://<name>/SKILL.md and run its steps yourself"
)


class WorkspaceHost(Protocol):
    """Where a tool finds the workspace the worker holds for the call."""

    def held(self, tenant_id: str, session_id: str) -> Workspace:
        """The session's workspace, locked by the worker for this call."""
        ...


def _fail(error: str) -> ToolOutcome:
    return ToolOutcome(success=False, error=error)


class ShellExec:
    """``shell_exec`` (T-15)."""

    spec: ToolSpec = SHELL_EXEC

    def __init__(
        self, host: WorkspaceHost, backend: SandboxBackend, skills: SkillLibrary | None = None
    ):
        self._host = host
        self._backend = backend
        self._skills = skills

    async def run(self, call: ToolInvocation) -> ToolOutcome:
        """Run the command in the session's sandbox (with a skill's package mounted when
        ``skill_name`` names one the agent may use)."""
        args = call.args(ShellExecArguments)
        mounts: tuple[tuple[str, str], ...] = ()
        env = dict(args.env)
        if args.skill_name:
            if self._skills is None:
                return _fail(f"shell_exec: {NO_SKILLS}")
            if not self._backend.mounts_read_only:
                return _fail(f"shell_exec: {SKILLS_NOT_ON_BACKEND}")
            try:
                package = await self._skills.package(
                    call.context, call.tenant_id, args.skill_name, call.credential
                )
            except SkillUnavailable as exc:
                return _fail(f"shell_exec: {exc}")
            owner = call.context.retrieval_tenant_id or call.tenant_id
            folder = await self._skills.mount(owner, package)
            mounts = ((str(folder), mount_point(package.name)),)
            env[SKILL_DIR_ENV] = mount_point(package.name)  # after the caller's: not spoofable
        if (problem := check_env(args.env)) is not None:
            return _fail(f"shell_exec: {problem}")
        stdin = args.stdin.encode()
        if len(stdin) > 64 * 1024:
            return _fail(f"shell_exec: stdin is {len(stdin)} bytes; at most 65536")
        space = self._host.held(call.tenant_id, call.session_id)
        try:
            cwd = space.host_path(args.work_dir)
        except PathRefused as exc:
            return _fail(f"shell_exec: work_dir {exc}")
        if not cwd.is_dir():
            return _fail(f"shell_exec: work_dir {args.work_dir!r} is not a folder")
        command = Command(
            command=args.command, work_dir=space.sandbox_path(cwd), stdin=stdin, env=env,
            timeout_s=args.timeout_sec, stdout_cap=args.max_output_bytes,
            stderr_cap=args.max_stderr_bytes, read_only_mounts=mounts,
        )  # fmt: skip
        result = await self._backend.run(space, command)
        return _shell_outcome(result, args.timeout_sec)


def _shell_outcome(result: CommandResult, timeout_s: int) -> ToolOutcome:
    out = result.stdout.decode(errors="replace")
    err = result.stderr.decode(errors="replace")
    parts = [f"exit_code: {'killed' if result.exit_code is None else result.exit_code}"]
    parts.append(f"stdout:\n{out}" + _cut_note(result.stdout, result.stdout_total))
    parts.append(f"stderr:\n{err}" + _cut_note(result.stderr, result.stderr_total))
    data = {
        "exit_code": result.exit_code, "timed_out": result.timed_out,
        "stdout_bytes": result.stdout_total, "stderr_bytes": result.stderr_total,
        "stdout_truncated": result.stdout_total > len(result.stdout),
        "stderr_truncated": result.stderr_total > len(result.stderr),
        "duration_ms": result.duration_ms,
    }  # fmt: skip
    text = "\n".join(parts)
    if result.timed_out:
        error = (
            f"shell_exec: the command ran past its {timeout_s}s timeout and was stopped "
            f"(SIGTERM, then SIGKILL). Output so far:\n{text}"
        )
        return ToolOutcome(success=False, error=error, output=text, data=data)
    return ToolOutcome(success=True, output=text, data=data)


def _cut_note(kept: bytes, total: int) -> str:
    if total <= len(kept):
        return ""
    return f"\n[truncated: kept {len(kept)} of {total} bytes; raise max_output_bytes or page]"


class ReadFile:
    """``read_file`` (T-14): workspace paths, web:// snapshots, attachment:// (the
    session's ``/workspace/input``), skill:// (a file of a skill the agent may use)."""

    spec: ToolSpec = READ_FILE

    def __init__(
        self,
        host: WorkspaceHost | None,
        snapshots: SnapshotStore,
        skills: SkillLibrary | None = None,
    ):
        self._host = host
        self._snapshots = snapshots
        self._skills = skills

    async def run(self, call: ToolInvocation) -> ToolOutcome:
        """Read one page of lines."""
        args = call.args(ReadFileArguments)
        path = args.path.strip()
        if path.startswith("skill://"):
            return await self._read_skill(call, path, args)
        if path.startswith("web://"):
            text = await self._snapshots.load(call.tenant_id, call.session_id, path)
            if text is None:
                return _fail(f"read_file: no web snapshot {path!r} in this conversation")
            return _page(path, text, args, min(args.max_bytes, READ_WEB_MAX_BYTES))
        if self._host is None:
            return _fail("read_file: no sandbox is configured, so only web:// can be read")
        if path.startswith("attachment://"):
            path = f"{WORKSPACE}/{INPUT}/{path.removeprefix('attachment://')}"
        space = self._host.held(call.tenant_id, call.session_id)
        try:
            host = space.host_path(path)
        except PathRefused as exc:
            return _fail(f"read_file: {exc}")
        if not host.is_file():
            what = "a folder" if host.is_dir() else "not found"
            return _fail(f"read_file: {args.path!r} is {what}")
        raw = await asyncio.to_thread(_read_prefix, host, 64 * 1024 * 1024)
        if b"\x00" in raw[:8192]:
            return _fail(f"read_file: {args.path!r} is a binary file; use shell_exec to inspect it")
        return _page(args.path, raw.decode(errors="replace"), args, args.max_bytes)

    async def _read_skill(
        self, call: ToolInvocation, uri: str, args: ReadFileArguments
    ) -> ToolOutcome:
        if self._skills is None:
            return _fail(f"read_file: {NO_SKILLS}")
        try:
            ref = SkillRef.parse(uri)
            package = await self._skills.package(
                call.context, call.tenant_id, ref.name, call.credential
            )
            text = skill_file_text(package, ref.path)
        except SkillUnavailable as exc:
            return _fail(f"read_file: {exc}")
        return _page(f"skill://{ref.name}/{ref.path}", text, args, args.max_bytes)


def _read_prefix(path: Path, limit: int) -> bytes:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as f:
        return f.read(limit)


def _page(path: str, text: str, args: ReadFileArguments, max_bytes: int) -> ToolOutcome:
    lines = text.splitlines(keepends=True)
    start = args.offset - 1
    if start >= len(lines) and lines:
        return _fail(f"read_file: offset {args.offset} is past the end ({len(lines)} lines)")
    taken: list[str] = []
    size = 0
    for line in lines[start : start + args.limit]:
        encoded = len(line.encode())
        if taken and size + encoded > max_bytes:
            break
        taken.append(
            line if encoded <= max_bytes else line.encode()[:max_bytes].decode(errors="ignore")
        )
        size += encoded
    end = start + len(taken)
    next_offset = end + 1 if end < len(lines) else None
    body = "".join(taken)
    if next_offset is not None:
        body += f"\n[more: lines {end + 1}-{len(lines)} remain; read_file offset={next_offset}]"
    data = {"path": path, "offset": args.offset, "lines": len(taken),
            "total_lines": len(lines), "next_offset": next_offset}  # fmt: skip
    return ToolOutcome(success=True, output=body, data=data)


class WriteSandboxFile:
    """``write_sandbox_file`` (T-16)."""

    spec: ToolSpec = WRITE_SANDBOX_FILE

    def __init__(self, host: WorkspaceHost):
        self._host = host

    async def run(self, call: ToolInvocation) -> ToolOutcome:
        """Overwrite or append."""
        args = call.args(WriteSandboxFileArguments)
        space = self._host.held(call.tenant_id, call.session_id)
        data = args.content.encode()
        try:
            host = space.host_path(args.path, for_write=True)
        except PathRefused as exc:
            return _fail(f"write_sandbox_file: {exc}")
        existing = host.stat().st_size if args.mode == "append" and host.is_file() else 0
        if existing + len(data) > WRITE_MAX_BYTES:
            return _fail(
                f"write_sandbox_file: the file would be {existing + len(data)} bytes; "
                f"at most {WRITE_MAX_BYTES} (8 MiB) per file"
            )
        if host.is_dir():
            return _fail(f"write_sandbox_file: {args.path!r} is a folder")
        try:
            await asyncio.to_thread(
                write_as_sandbox, space, host, data, append=args.mode == "append"
            )
        except OSError as exc:
            return _fail(f"write_sandbox_file: {exc.strerror or exc}")
        shown = space.sandbox_path(host)
        verb = "appended" if args.mode == "append" else "wrote"
        return ToolOutcome(
            success=True,
            output=f"{verb} {len(data)} bytes to {shown}",
            data={"path": shown, "bytes": len(data), "mode": args.mode},
        )


def write_as_sandbox(space: Workspace, host: Path, data: bytes, *, append: bool) -> None:
    """Write as the service but leave the file to the sandbox's uid; never through a
    symlink planted after the path was checked (O_NOFOLLOW)."""
    missing = [p for p in [host.parent, *host.parent.parents] if not p.exists()]
    for directory in reversed(missing):
        directory.mkdir()
        os.lchown(directory, space.uid, space.gid)
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | (os.O_APPEND if append else os.O_TRUNC)
    fd = os.open(host, flags, 0o644)
    try:
        os.fchown(fd, space.uid, space.gid)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


class EditSandboxFile:
    """``edit_sandbox_file`` (T-16): every replacement against the original; one failing,
    ambiguous or overlapping edit rejects the batch."""

    spec: ToolSpec = EDIT_SANDBOX_FILE

    def __init__(self, host: WorkspaceHost):
        self._host = host

    async def run(self, call: ToolInvocation) -> ToolOutcome:
        """Apply the batch or nothing."""
        args = call.args(EditSandboxFileArguments)
        space = self._host.held(call.tenant_id, call.session_id)
        try:
            host = space.host_path(args.path, for_write=True)
        except PathRefused as exc:
            return _fail(f"edit_sandbox_file: {exc}")
        if not host.is_file():
            return _fail(f"edit_sandbox_file: {args.path!r} is not an existing file")
        original = (await asyncio.to_thread(_read_prefix, host, WRITE_MAX_BYTES + 1)).decode(
            errors="replace"
        )
        try:
            edited = apply_edits(original, args.edits)
        except EditRejected as exc:
            return _fail(f"edit_sandbox_file: {exc}; nothing was changed")
        data = edited.encode()
        if len(data) > WRITE_MAX_BYTES:
            return _fail("edit_sandbox_file: the result would exceed 8 MiB; nothing was changed")
        await asyncio.to_thread(write_as_sandbox, space, host, data, append=False)
        shown = space.sandbox_path(host)
        return ToolOutcome(
            success=True,
            output=f"applied {len(args.edits)} edit(s) to {shown}",
            data={"path": shown, "edits": len(args.edits)},
        )


class EditRejected(ValueError):
    """The batch of edits cannot be applied as a whole (the message says why)."""


def apply_edits(original: str, edits: list[SandboxEdit]) -> str:
    """The edited text; :class:`EditRejected` when any edit fails, is ambiguous or
    overlaps another (then nothing is applied)."""
    spans: list[tuple[int, int, str, int]] = []
    for number, edit in enumerate(edits, 1):
        found = _occurrences(original, edit.old_string)
        if not found:
            raise EditRejected(f"edit {number}: old_string not found")
        if len(found) > 1 and not edit.replace_all:
            raise EditRejected(
                f"edit {number}: old_string occurs {len(found)} times; make it unique "
                "or set replace_all"
            )
        spans += [(s, s + len(edit.old_string), edit.new_string, number) for s in found]
    spans.sort()
    for (_, end, _, a), (start, _, _, b) in itertools.pairwise(spans):
        if start < end:
            raise EditRejected(f"edits {a} and {b} overlap")
    pieces: list[str] = []
    cursor = 0
    for start, end, new, _ in spans:
        pieces += [original[cursor:start], new]
        cursor = end
    return "".join([*pieces, original[cursor:]])


def _occurrences(text: str, needle: str) -> list[int]:
    found: list[int] = []
    at = text.find(needle)
    while at != -1:
        found.append(at)
        at = text.find(needle, at + len(needle))
    return found


class ListSandboxFiles:
    """``list_sandbox_files`` (T-16)."""

    spec: ToolSpec = LIST_SANDBOX_FILES

    def __init__(self, host: WorkspaceHost):
        self._host = host

    async def run(self, call: ToolInvocation) -> ToolOutcome:
        """Walk the folder, files with sizes and modification times."""
        args = call.args(ListSandboxFilesArguments)
        space = self._host.held(call.tenant_id, call.session_id)
        try:
            top = space.host_path(args.path)
        except PathRefused as exc:
            return _fail(f"list_sandbox_files: {exc}")
        if not top.is_dir():
            return _fail(f"list_sandbox_files: {args.path!r} is not a folder")
        entries = await asyncio.to_thread(_walk, space, top, args.max_entries + 1)
        more = len(entries) > args.max_entries
        entries = entries[: args.max_entries]
        lines = [f"{e['path']}\t{e['bytes']}\t{e['modified']}" for e in entries]
        if more:
            lines.append(f"[more than {args.max_entries} entries; list a subfolder]")
        return ToolOutcome(
            success=True, output="\n".join(lines) or "(empty)",
            data={"entries": entries, "truncated": more},
        )  # fmt: skip


def _walk(space: Workspace, top: Path, limit: int) -> list[dict[str, object]]:
    found: list[dict[str, object]] = []
    for directory, dirs, files in os.walk(top):
        dirs.sort()
        for name in sorted(files):
            path = Path(directory) / name
            stat = path.lstat()
            modified = datetime.fromtimestamp(stat.st_mtime, UTC).isoformat(timespec="seconds")
            found.append({"path": space.sandbox_path(path.parent) + "/" + name,
                          "bytes": stat.st_size, "modified": modified})  # fmt: skip
            if len(found) >= limit:
                return found
    return found


def sandbox_registry(
    host: WorkspaceHost | None,
    backend: SandboxBackend | None,
    snapshots: SnapshotStore,
    skills: SkillLibrary | None = None,
) -> ToolRegistry:
    """The sandbox's tools; without a backend (no sandbox configured) only ``read_file``,
    for web snapshots."""
    registry = ToolRegistry()
    registry.register(ReadFile(host, snapshots, skills))
    if host is not None and backend is not None:
        registry.register(ShellExec(host, backend, skills))
        registry.register(WriteSandboxFile(host))
        registry.register(EditSandboxFile(host))
        registry.register(ListSandboxFiles(host))
    return registry
