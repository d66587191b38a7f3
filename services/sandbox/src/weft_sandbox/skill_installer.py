"""The skill installer's tools (SPEC S-04): ``write_skill_file`` and ``edit_skill_file``
write inside the skill being installed, a draft folder of the session's workspace
(``/workspace/skill-draft``), then validate the folder and, when it is a valid package,
install it as the tenant's skill.

Reserved to the built-in skill installer: agent-config offers the tools to no other agent,
and the tools check the call's agent again. Paths are relative to the draft folder and
checked like a package's (no ``..``, no absolute path); the folder is read without
following links, so a symlink a command planted there fails validation. The installer
replaces only a skill its own session installed, never another one of the tenant. The
package is installed by agent-config, which owns the skills, asked with the call's turn
credential (:mod:`weft_sandbox.skill_source`).
"""

from __future__ import annotations

import asyncio
import os
import stat
from pathlib import Path

from weft_contracts.skill_packages import (
    MAX_FILE_BYTES,
    MAX_FILES,
    PackageRejected,
    SkillFile,
    SkillPackage,
    build_package,
    check_path,
)
from weft_tool_catalog import ToolInvocation, ToolOutcome, ToolSpec
from weft_tool_catalog.registry import ToolRegistry
from weft_tool_catalog.sandbox_specs import (
    EDIT_SKILL_FILE,
    SKILL_DRAFT,
    SKILL_INSTALLER_AGENT,
    WRITE_SKILL_FILE,
    EditSkillFileArguments,
    SandboxEdit,
    WriteSkillFileArguments,
)

from weft_sandbox.skill_source import SkillSource, SkillsUnreachable, SkillTaken
from weft_sandbox.tools import EditRejected, WorkspaceHost, apply_edits, write_as_sandbox
from weft_sandbox.workspace import PathRefused, Workspace


def _fail(error: str) -> ToolOutcome:
    return ToolOutcome(success=False, error=error)


class SkillDraft:
    """Writes into the draft folder of the held workspace, then installs what it holds."""

    def __init__(self, host: WorkspaceHost, source: SkillSource):
        self._host = host
        self._source = source

    def target(self, call: ToolInvocation, tool: str, path: str) -> tuple[Workspace, Path]:
        """The workspace and host path of a draft file; :class:`PathRefused` or
        :class:`PackageRejected` when the call may not write it."""
        if call.context.agent_id != SKILL_INSTALLER_AGENT:
            raise PathRefused(f"{tool} is reserved to the built-in skill installer")
        relative = check_path(path.removeprefix(f"{SKILL_DRAFT}/"))
        space = self._host.held(call.tenant_id, call.session_id)
        return space, space.host_path(f"{SKILL_DRAFT}/{relative}", for_write=True)

    async def install(self, call: ToolInvocation, space: Workspace, written: str) -> ToolOutcome:
        """Validate the draft folder and install it; what the model reads either way."""
        folder = space.host_path(SKILL_DRAFT)
        try:
            package = await asyncio.to_thread(package_from_folder, folder)
        except PackageRejected as exc:
            return ToolOutcome(
                success=True,
                output=f"{written}; the skill is not installed yet: {exc}",
                data={"installed": False, "reason": str(exc)},
            )
        try:
            summary = await self._source.install(
                call.credential, call.tenant_id, call.session_id, package
            )
        except SkillTaken:
            return _fail(
                f"{written}, but the tenant already has a skill named {package.name!r} that "
                "this installation did not create; choose another name in SKILL.md"
            )
        except SkillsUnreachable as exc:
            return _fail(f"{written}, but {exc}")
        name, count = summary.get("name"), summary.get("file_count")
        return ToolOutcome(
            success=True,
            output=f"{written}; installed skill {name!r} ({count} files)",
            data={"installed": True, "skill": name, "digest": summary.get("digest")},
        )


class WriteSkillFile:
    """``write_skill_file``."""

    spec: ToolSpec = WRITE_SKILL_FILE

    def __init__(self, draft: SkillDraft):
        self._draft = draft

    async def run(self, call: ToolInvocation) -> ToolOutcome:
        """Write one file of the draft, then validate and install it."""
        args = call.args(WriteSkillFileArguments)
        try:
            space, host = self._draft.target(call, "write_skill_file", args.path)
        except (PathRefused, PackageRejected) as exc:
            return _fail(f"write_skill_file: {exc}")
        if host.is_dir():
            return _fail(f"write_skill_file: {args.path!r} is a folder")
        data = args.content.encode()
        await asyncio.to_thread(write_as_sandbox, space, host, data, append=False)
        host.chmod(0o755 if args.executable else 0o644)
        return await self._draft.install(call, space, f"wrote {len(data)} bytes to {args.path}")


class EditSkillFile:
    """``edit_skill_file``."""

    spec: ToolSpec = EDIT_SKILL_FILE

    def __init__(self, draft: SkillDraft):
        self._draft = draft

    async def run(self, call: ToolInvocation) -> ToolOutcome:
        """Replace in one file of the draft, then validate and install it."""
        args = call.args(EditSkillFileArguments)
        try:
            space, host = self._draft.target(call, "edit_skill_file", args.path)
        except (PathRefused, PackageRejected) as exc:
            return _fail(f"edit_skill_file: {exc}")
        if not host.is_file() or host.is_symlink():
            return _fail(f"edit_skill_file: {args.path!r} is not a file of the skill")
        original = (await asyncio.to_thread(_read, host)).decode(errors="replace")
        edit = SandboxEdit(
            old_string=args.old_string, new_string=args.new_string, replace_all=args.replace_all
        )
        try:
            edited = apply_edits(original, [edit])
        except EditRejected as exc:
            return _fail(f"edit_skill_file: {exc}; nothing was changed")
        mode = host.stat().st_mode
        await asyncio.to_thread(write_as_sandbox, space, host, edited.encode(), append=False)
        host.chmod(stat.S_IMODE(mode))
        return await self._draft.install(call, space, f"edited {args.path}")


def _read(path: Path) -> bytes:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as f:
        return f.read(MAX_FILE_BYTES + 1)


def package_from_folder(folder: Path) -> SkillPackage:
    """The package a draft folder holds; symlinks and special files are refused, never
    followed, and sizes are checked before a file is read."""
    if not folder.is_dir() or folder.is_symlink():
        raise PackageRejected(f"{SKILL_DRAFT} does not exist yet; write SKILL.md first")
    files: list[SkillFile] = []
    for directory, dirs, names in os.walk(folder):
        here = Path(directory)
        for name in sorted(dirs + names):
            path = here / name
            relative = path.relative_to(folder).as_posix()
            info = path.lstat()
            if stat.S_ISLNK(info.st_mode):
                raise PackageRejected(f"{relative!r} is a symlink; a skill holds files only")
            if stat.S_ISDIR(info.st_mode):
                continue
            if not stat.S_ISREG(info.st_mode):
                raise PackageRejected(f"{relative!r} is not a regular file")
            if info.st_size > MAX_FILE_BYTES or len(files) >= MAX_FILES:
                raise PackageRejected(f"{relative!r}: the skill is over its size or file caps")
            executable = bool(info.st_mode & 0o111)
            files.append(SkillFile(relative, _read(path), executable))
    return build_package(files)


def register_installer(registry: ToolRegistry, host: WorkspaceHost, source: SkillSource) -> None:
    """Add the two tools, over one draft, to the sandbox's registry."""
    draft = SkillDraft(host, source)
    registry.register(WriteSkillFile(draft))
    registry.register(EditSkillFile(draft))
