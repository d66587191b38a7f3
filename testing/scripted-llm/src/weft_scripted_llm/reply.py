"""The answer a policy decides on, before it is encoded as a response.

A `Reply` says what the (fake) model says -- reasoning, content, tool calls, finish
reason, usage override -- and which faults to inject while saying it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

FinishReason = Literal["stop", "tool_calls", "length", "content_filter"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ErrorFault(_Strict):
    """An error answered instead of a completion, as an OpenAI-style JSON error body."""

    status: int = Field(ge=400, le=599)
    message: str = "scripted LLM: injected error"
    type: str | None = None
    code: str | None = None
    retry_after: float | None = Field(default=None, ge=0)
    should_retry: bool | None = None


class UsageOverride(_Strict):
    """Replaces the estimated token counts; a missing total is the sum of the others."""

    prompt_tokens: int | None = Field(default=None, ge=0)
    completion_tokens: int | None = Field(default=None, ge=0)
    total_tokens: int | None = Field(default=None, ge=0)


@dataclass(frozen=True)
class Faults:
    """Misbehaviour injected while answering."""

    delay_ms: int = 0
    chunk_delay_ms: int = 0
    error: ErrorFault | None = None
    stall_after_chunks: int | None = None
    context_overflow: bool = False


@dataclass(frozen=True)
class ToolCallReply:
    """A tool call; `arguments` is sent verbatim, so it may be broken JSON on purpose."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class Reply:
    """What to answer. `content` and `reasoning` are stream pieces; joined they are the text."""

    content: tuple[str, ...] = ()
    reasoning: tuple[str, ...] = ()
    tool_calls: tuple[ToolCallReply, ...] = ()
    finish_reason: FinishReason | None = None
    usage: UsageOverride | None = None
    faults: Faults = field(default_factory=Faults)

    @property
    def content_text(self) -> str | None:
        return "".join(self.content) if self.content else None

    @property
    def reasoning_text(self) -> str | None:
        return "".join(self.reasoning) if self.reasoning else None

    @property
    def final_finish_reason(self) -> FinishReason:
        """The scripted finish reason, else `tool_calls` when calling tools, else `stop`."""
        if self.finish_reason is not None:
            return self.finish_reason
        return "tool_calls" if self.tool_calls else "stop"
