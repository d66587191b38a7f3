"""Exit codes of ``weft`` and the one exception that carries them to the entry point.

A command never lets a traceback reach the operator: what went wrong is raised as
:class:`CommandFailed` with a sentence for people and the exit code a script can branch on.
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """What ``weft`` exits with (docs/cli.md, "Exit codes")."""

    OK = 0
    FAILED = 1
    """The operation ran and failed, or was refused for what it asked (a 4xx other than
    auth, a dead letter that cannot be replayed, a turn that ended failed)."""
    USAGE = 2
    """Bad flags or arguments, or a confirmation (``--yes``) left out."""
    AUTH = 3
    """Refused for who is asking: no or a wrong API key, operator token or Kafka login, or
    a principal without the right (HTTP 401/403, Kafka authorization failures)."""
    UNREACHABLE = 4
    """The gateway or the Kafka broker could not be reached (or answered 5xx/503)."""
    INTERRUPTED = 130
    """Stopped with Ctrl-C (the turn was asked to stop first)."""


class CommandFailed(Exception):
    """A command's failure as the operator sees it: ``message`` and the exit ``code``."""

    def __init__(self, message: str, code: ExitCode = ExitCode.FAILED):
        super().__init__(message)
        self.message = message
        self.code = code


def code_of_status(status: int) -> ExitCode:
    """The exit code of an HTTP answer that is not a success."""
    if status in (401, 403):
        return ExitCode.AUTH
    if status >= 500:
        return ExitCode.UNREACHABLE
    return ExitCode.FAILED
