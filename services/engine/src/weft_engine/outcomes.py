"""What one step of the loop can end in (STYLE principle 1)."""

from __future__ import annotations

from dataclasses import dataclass

from weft_contracts import ToolCallRequested


@dataclass(frozen=True)
class FinalAnswer:
    """The model answered; the turn ends."""

    text: str
    truncated: bool = False
    is_fallback: bool = False


@dataclass(frozen=True)
class ToolsDispatched:
    """Tool calls went to the workers; the turn waits for their results in Redis."""

    calls: list[ToolCallRequested]


@dataclass(frozen=True)
class Failed:
    """The turn cannot go on (e.g. the model is unreachable after retries)."""

    code: str
    message: str


StepOutcome = FinalAnswer | ToolsDispatched | Failed
