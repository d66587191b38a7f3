"""What a sandbox backend offers the tools: run one command in a session's workspace."""

from __future__ import annotations

from typing import Protocol

from weft_sandbox.local_backend import Command, CommandResult
from weft_sandbox.workspace import Workspace


class SandboxBackend(Protocol):
    """Runs commands in a session's sandbox (local bubblewrap, a Kubernetes pod)."""

    async def run(self, space: Workspace, command: Command) -> CommandResult:
        """Run ``command`` against ``space``; never raises for what the command does."""
        ...
