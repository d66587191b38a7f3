"""What the engine asks of a model, and what it gets back."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, get_args

from weft_llm.messages import ChatMessage

MAX_TOOL_NAME_CHARS = 64
MAX_TOOL_CALL_ID_CHARS = 128

RequestMessages = Sequence[ChatMessage]
"""A request's messages, in the wire format."""


@dataclass(frozen=True, kw_only=True)
class LLMRequest:
    """One chat completion request in OpenAI message format."""

    model: str
    messages: RequestMessages
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

    def __post_init__(self) -> None:
        # The name and id are the model's words, echoed into events, logs, span names and
        # the next request: a hijacked model must not make them arbitrarily long. No real
        # tool name is longer (OpenAI's own limit for function names is 64).
        object.__setattr__(self, "name", self.name[:MAX_TOOL_NAME_CHARS])
        object.__setattr__(self, "id", self.id[:MAX_TOOL_CALL_ID_CHARS])


@dataclass(frozen=True, kw_only=True)
class Usage:
    """Token usage reported by the provider."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0


FinishReason = Literal[
    "stop",
    "length",
    "tool_calls",
    "content_filter",
    "function_call",
    "end_turn",
    "stop_sequence",
    "max_tokens",
    "max_output_tokens",
]
"""Why the model stopped: OpenAI's values plus the ones OpenAI-compatible gateways pass
through from other providers (Anthropic's end_turn/stop_sequence/max_tokens, Gemini's
max_output_tokens) that the engine handles."""

FINISH_REASONS: frozenset[str] = frozenset(get_args(FinishReason))


def finish_reason(raw: str | None, *, has_tool_calls: bool) -> FinishReason:
    """The provider's ``finish_reason`` as a :data:`FinishReason`.

    A missing or unknown value (a provider's own word, e.g. ``"error"`` or ``"recitation"``)
    becomes what a complete response of that shape reports: ``tool_calls`` when the model
    asked for tools, else ``stop``. The engine then judges the response by its content (an
    empty answer is retried, SPEC E-11) instead of by a reason it cannot interpret.
    """
    if raw in FINISH_REASONS:
        return raw  # type: ignore[return-value]  # checked against the Literal's values
    return "tool_calls" if has_tool_calls else "stop"


@dataclass(frozen=True, kw_only=True)
class LLMResponse:
    """A finished (streamed) completion."""

    content: str
    reasoning: str
    tool_calls: list[ToolCallRequest]
    finish_reason: FinishReason
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
    """The model call failed and retrying the same request will not help (a 4xx, a
    refused request); ``status`` is the provider's HTTP status when it answered."""

    def __init__(self, message: str, *, status: int | None = None):
        super().__init__(message)
        self.status = status


class TransientLLMError(LLMCallError):
    """The call failed for a reason that may pass: 408/409/429/5xx/529, overloaded,
    unreachable, timed out (SPEC E-07: retried with backoff)."""


class ModelStalledError(TransientLLMError):
    """No output arrived for ``stalled_s`` seconds and the call was cut (SPEC E-06)."""

    def __init__(self, message: str, *, stalled_s: float):
        super().__init__(message)
        self.stalled_s = stalled_s


class ContextOverflowError(LLMCallError):
    """The provider refused the request as too long for the model's context window
    (SPEC E-25). A completion cut by its token budget is not this: that is a
    ``length`` finish reason."""
