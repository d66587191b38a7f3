"""A ``ChatModel`` that reports every call to a meter: duration, time to first token,
tokens and errors by model. The meter is the caller's (the services pass the one
``weft_platform.metrics`` builds on its Prometheus metrics), so this library needs no
metrics client of its own."""

from __future__ import annotations

import time
from typing import Protocol

from weft_llm.model import (
    ChatModel,
    ContextOverflowError,
    LLMCallError,
    LLMRequest,
    LLMResponse,
    ModelStalledError,
    StreamSink,
    TransientLLMError,
    Usage,
)


class LLMMeter(Protocol):
    """Where a metered model reports."""

    def failed(self, model: str, reason: str) -> None:
        """A call of ``model`` failed for ``reason`` (``llm_error_reason``)."""
        ...

    def answered(
        self, model: str, seconds: float, first_token_s: float | None, usage: Usage | None
    ) -> None:
        """A call of ``model`` answered after ``seconds``; its first delta after
        ``first_token_s`` (None: none streamed)."""
        ...


def llm_error_reason(exc: LLMCallError) -> str:
    """A short, bounded reason of a failed model call."""
    if isinstance(exc, ModelStalledError):
        return "stalled"
    if isinstance(exc, ContextOverflowError):
        return "context_overflow"
    if exc.status == 429:
        return "rate_limited"
    if isinstance(exc, TransientLLMError):
        return "transient"
    return "refused" if exc.status is not None else "failed"


class _FirstToken:
    """A sink that notes when the first delta (reasoning or content) arrived."""

    __slots__ = ("_inner", "first_at")

    def __init__(self, inner: StreamSink):
        self._inner = inner
        self.first_at: float | None = None

    async def on_reasoning(self, delta: str) -> None:
        if self.first_at is None:
            self.first_at = time.perf_counter()
        await self._inner.on_reasoning(delta)

    async def on_content(self, delta: str) -> None:
        if self.first_at is None:
            self.first_at = time.perf_counter()
        await self._inner.on_content(delta)


class MeteredModel:
    """``model``, reporting each call to ``meter``."""

    def __init__(self, model: ChatModel, meter: LLMMeter):
        self._model = model
        self._meter = meter

    async def stream(self, request: LLMRequest, sink: StreamSink) -> LLMResponse:
        started = time.perf_counter()
        timed = _FirstToken(sink)
        try:
            response = await self._model.stream(request, timed)
        except LLMCallError as exc:
            self._meter.failed(request.model, llm_error_reason(exc))
            raise
        first = None if timed.first_at is None else timed.first_at - started
        self._meter.answered(request.model, time.perf_counter() - started, first, response.usage)
        return response
