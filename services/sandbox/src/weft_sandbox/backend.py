"""What a sandbox backend offers the tools: run one command in a session's workspace."""

from __future__ import annotations

from typing import Protocol

from weft_sandbox.local_backend import Command, CommandResult
from weft_sandbox.workspace import Workspace


class SandboxBackend(Protocol):
    """Runs commands in a session's sandbox (local bubblewrap, a Kubernetes pod)."""

    mounts_read_only: bool
    """Whether ``Command.read_only_mounts`` reach the command (a skill's package for
    ``shell_exec(skill_name=...)``); a backend without them is never given a skill to run."""

    async def run(self, space: Workspace, command: Command) -> CommandResult:
        """Run ``command`` against ``space``; never raises for what the command does."""
        ...
