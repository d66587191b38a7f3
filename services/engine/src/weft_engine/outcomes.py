"""What analysing one LLM response can lead to (STYLE principle 1, SPEC E-20)."""

from __future__ import annotations

from dataclasses import dataclass

from weft_contracts import ErrorCode
from weft_llm import ToolCallRequest


@dataclass(frozen=True)
class Answer:
    """Break: the turn ends with this final answer."""

    text: str
    truncated: bool = False
    is_fallback: bool = False


@dataclass(frozen=True)
class Retry:
    """Continue: ask again without consuming a round, after appending ``nudge``."""

    nudge: str


@dataclass(frozen=True)
class Dispatch:
    """Next: run these tool calls, then start the next round."""

    calls: list[ToolCallRequest]


@dataclass(frozen=True)
class Intermediate:
    """Next: a steer message arrived, so this answer is not final; the agent reads it and
    goes on (SPEC E-13)."""

    text: str


@dataclass(frozen=True)
class Fail:
    """Break: the turn ends with an error."""

    code: ErrorCode
    message: str


StepOutcome = Answer | Retry | Dispatch | Intermediate | Fail
