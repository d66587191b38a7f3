"""Specs of the sandbox tools (SPEC T-14..T-16): what the model is told and the limits the
sandbox service enforces. The engine routes these names to ``sandbox.calls``."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from weft_tool_catalog.arguments import ToolArguments
from weft_tool_catalog.registry import ToolSpec

KIB = 1024
MIB = 1024 * KIB

SHELL_TIMEOUT_DEFAULT_S = 120
SHELL_TIMEOUT_MAX_S = 600
SHELL_STDIN_MAX_BYTES = 64 * KIB
SHELL_STDOUT_DEFAULT_BYTES = 16 * KIB
SHELL_STDOUT_MAX_BYTES = 64 * KIB
SHELL_STDERR_DEFAULT_BYTES = 8 * KIB
SHELL_STDERR_MAX_BYTES = 16 * KIB
WRITE_MAX_BYTES = 8 * MIB
READ_DEFAULT_LINES = 2000
READ_MAX_BYTES = 64 * KIB
READ_WEB_MAX_BYTES = 50 * KIB
SKILL_FILE_MAX_BYTES = 256 * KIB
LIST_DEFAULT_ENTRIES = 200
LIST_MAX_ENTRIES = 500

Path = Annotated[str, Field(min_length=1, max_length=4096)]


class ShellExecArguments(ToolArguments):
    """``shell_exec`` (T-15)."""

    command: Annotated[str, Field(min_length=1, max_length=64 * KIB, description="sh -c command.")]
    work_dir: Annotated[str, Field(max_length=4096, description="Default /workspace.")] = (
        "/workspace"
    )
    timeout_sec: Annotated[int, Field(ge=1, le=SHELL_TIMEOUT_MAX_S)] = SHELL_TIMEOUT_DEFAULT_S
    stdin: Annotated[str, Field(max_length=SHELL_STDIN_MAX_BYTES)] = ""
    max_output_bytes: Annotated[int, Field(ge=1, le=SHELL_STDOUT_MAX_BYTES)] = (
        SHELL_STDOUT_DEFAULT_BYTES
    )
    max_stderr_bytes: Annotated[int, Field(ge=1, le=SHELL_STDERR_MAX_BYTES)] = (
        SHELL_STDERR_DEFAULT_BYTES
    )
    env: dict[str, str] = Field(default_factory=dict, max_length=64)
    skill_name: str | None = None


class ReadFileArguments(ToolArguments):
    """``read_file`` (T-14)."""

    path: Path
    offset: Annotated[int, Field(ge=1, description="First line, 1-based.")] = 1
    limit: Annotated[int, Field(ge=1, le=100_000, description="Lines.")] = READ_DEFAULT_LINES
    max_bytes: Annotated[int, Field(ge=1, le=READ_MAX_BYTES)] = READ_MAX_BYTES


class WriteSandboxFileArguments(ToolArguments):
    """``write_sandbox_file`` (T-16)."""

    path: Path
    content: Annotated[str, Field(max_length=WRITE_MAX_BYTES)]
    mode: Literal["overwrite", "append"] = "overwrite"


class SandboxEdit(ToolArguments):
    """One exact replacement of ``edit_sandbox_file``."""

    old_string: Annotated[str, Field(min_length=1)]
    new_string: str
    replace_all: bool = False


class EditSandboxFileArguments(ToolArguments):
    """``edit_sandbox_file`` (T-16)."""

    path: Path
    edits: Annotated[list[SandboxEdit], Field(min_length=1, max_length=100)]


class ListSandboxFilesArguments(ToolArguments):
    """``list_sandbox_files`` (T-16)."""

    path: Annotated[str, Field(max_length=4096)] = "/workspace"
    max_entries: Annotated[int, Field(ge=1, le=LIST_MAX_ENTRIES)] = LIST_DEFAULT_ENTRIES


class WriteSkillFileArguments(ToolArguments):
    """``write_skill_file`` (S-04, the skill installer's)."""

    path: Annotated[str, Field(min_length=1, max_length=255, description="Inside the skill.")]
    content: Annotated[str, Field(max_length=SKILL_FILE_MAX_BYTES)]
    executable: bool = False


class EditSkillFileArguments(ToolArguments):
    """``edit_skill_file`` (S-04, the skill installer's)."""

    path: Annotated[str, Field(min_length=1, max_length=255, description="Inside the skill.")]
    old_string: Annotated[str, Field(min_length=1)]
    new_string: str
    replace_all: bool = False


SHELL_EXEC = ToolSpec(
    name="shell_exec",
    description=(
        "Run a shell command (sh -c) in this conversation's sandbox: cwd /workspace, no "
        "network, files under /workspace persist between calls, /workspace/input holds "
        "attachments (read-only), put deliverables in /workspace/output. timeout_sec "
        "default 120, max 600."
    ),
    arguments=ShellExecArguments,
    read_only=False,
)
READ_FILE = ToolSpec(
    name="read_file",
    description=(
        "Read a text file: a sandbox path (/workspace/...), a web:// snapshot saved by "
        "web_fetch, attachment://<name> or skill://<name>/<file>. offset/limit in lines "
        "(default 2000); the answer gives next_offset when there is more."
    ),
    arguments=ReadFileArguments,
    read_only=True,
)
WRITE_SANDBOX_FILE = ToolSpec(
    name="write_sandbox_file",
    description=(
        "Write (mode overwrite, default) or append to a file under /workspace, at most "
        "8 MiB; /workspace/input is read-only."
    ),
    arguments=WriteSandboxFileArguments,
    read_only=False,
)
EDIT_SANDBOX_FILE = ToolSpec(
    name="edit_sandbox_file",
    description=(
        "Apply exact replacements to a file under /workspace, all against its current "
        "version: if one old_string is missing, ambiguous (without replace_all) or "
        "overlaps another, nothing is changed."
    ),
    arguments=EditSandboxFileArguments,
    read_only=False,
)
LIST_SANDBOX_FILES = ToolSpec(
    name="list_sandbox_files",
    description="List files under a /workspace folder (default 200 entries, max 500).",
    arguments=ListSandboxFilesArguments,
    read_only=True,
)

SKILL_DRAFT = "/workspace/skill-draft"
"""Where the skill installer builds the skill it installs (in the session's workspace)."""
WRITE_SKILL_FILE = ToolSpec(
    name="write_skill_file",
    description=(
        f"Skill installer only: write a file of the skill being installed (path relative to "
        f"the skill's folder, {SKILL_DRAFT}; at most 256 KiB). After each write the folder "
        "is validated (SKILL.md with name and description frontmatter) and, when valid, "
        "installed for this workspace; the answer says which."
    ),
    arguments=WriteSkillFileArguments,
    read_only=False,
)
EDIT_SKILL_FILE = ToolSpec(
    name="edit_skill_file",
    description=(
        "Skill installer only: replace old_string with new_string in a file of the skill "
        "being installed (exactly one occurrence unless replace_all), then validate and "
        "install it like write_skill_file."
    ),
    arguments=EditSkillFileArguments,
    read_only=False,
)

SANDBOX_SPECS: tuple[ToolSpec, ...] = (
    EDIT_SANDBOX_FILE,
    EDIT_SKILL_FILE,
    LIST_SANDBOX_FILES,
    READ_FILE,
    SHELL_EXEC,
    WRITE_SANDBOX_FILE,
    WRITE_SKILL_FILE,
)
"""Every tool the sandbox service runs."""

INSTALLER_TOOLS: frozenset[str] = frozenset({"write_skill_file", "edit_skill_file"})
"""Reserved to the built-in skill installer (dropped from every other agent's tools)."""
SKILL_INSTALLER_AGENT = "builtin-skill-installer"

SCRIPT_TOOLS: frozenset[str] = frozenset(
    {"shell_exec", "write_sandbox_file", "edit_sandbox_file", "list_sandbox_files",
     *INSTALLER_TOOLS}
)  # fmt: skip
"""Sandbox tools that need a sandbox (S-05); ``read_file`` also serves web:// snapshots
and attachments without one."""
