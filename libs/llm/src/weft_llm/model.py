"""What the engine asks of a model, and what it gets back."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True, kw_only=True)
class LLMRequest:
    """One chat completion request in OpenAI message format."""

    model: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] = field(default_factory=list)
    temperature: float = 0.7
    max_completion_tokens: int = 4096
    stall_timeout_s: float = 120.0
    """Cancel when no chunk arrives for this long (SPEC E-06)."""
    tool_choice: str | None = None
    reasoning_effort: str | None = None
    """SPEC A-05 level (off/auto/minimal/.../max) already fitted to the model; None: not
    sent. :func:`weft_llm.openai_model.wire_reasoning_effort` maps it to the wire."""


@dataclass(frozen=True, kw_only=True)
class ToolCallRequest:
    """A tool call as the model streamed it; ``arguments`` is raw text, maybe broken JSON."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True, kw_only=True)
class Usage:
    """Token usage reported by the provider."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0


@dataclass(frozen=True, kw_only=True)
class LLMResponse:
    """A finished (streamed) completion."""

    content: str
    reasoning: str
    tool_calls: list[ToolCallRequest]
    finish_reason: str
    usage: Usage | None = None


class StreamSink(Protocol):
    """Receives deltas while the model streams (SPEC E-08)."""

    async def on_reasoning(self, delta: str) -> None:
        """A piece of reasoning."""

    async def on_content(self, delta: str) -> None:
        """A piece of visible content."""


class ChatModel(Protocol):
    """The one method the engine needs from a model."""

    async def stream(self, request: LLMRequest, sink: StreamSink) -> LLMResponse:
        """Stream a completion, feeding ``sink``; raise :class:`LLMCallError` on failure."""
        ...


class LLMCallError(Exception):
    """The model call failed; ``transient`` says whether retrying may help (SPEC E-07),
    ``status`` is the provider's HTTP status, ``stalled_s`` the stall timeout that cut a
    call without output (SPEC E-06)."""

    def __init__(
        self,
        message: str,
        *,
        transient: bool,
        status: int | None = None,
        stalled_s: float | None = None,
    ):
        super().__init__(message)
        self.transient = transient
        self.status = status
        self.stalled_s = stalled_s
