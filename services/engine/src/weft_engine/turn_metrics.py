"""The engine's metrics: turns started and ended, rounds, and every model call
(``weft_platform.metrics`` defines them; docs/observability.md lists them).

A turn's end reason is the :data:`~weft_engine.outcomes.EndReason` case that ended it
(``answered``, ``stopped``, ``iteration_limit`` ...). ``TurnLoop._finish`` names it in a
context variable for the step's task before the Finisher completes the turn, and the
Finisher counts the end only when its ``complete`` is really sent (a takeover that finds
it sent counts nothing twice).
"""

from __future__ import annotations

import re
import time
from contextvars import ContextVar

from weft_llm import (
    ChatModel,
    ContextOverflowError,
    LLMCallError,
    LLMRequest,
    LLMResponse,
    ModelStalledError,
    StreamSink,
    TransientLLMError,
)
from weft_platform.metrics import (
    LLM_ERRORS,
    LLM_REQUEST_DURATION,
    LLM_TIME_TO_FIRST_TOKEN,
    LLM_TOKENS,
    ROUND_DURATION,
    ROUNDS,
    TURN_DURATION,
    TURNS_ENDED,
    TURNS_STARTED,
    budget_rejected,
    model_label,
    tenant_label,
)

from weft_engine.outcomes import EndReason, OverBudget
from weft_engine.state import TurnState

_END_REASON: ContextVar[str] = ContextVar("weft_end_reason", default="unknown")

_CAMEL = re.compile(r"(?<!^)(?=[A-Z])")


def end_reason_label(reason: EndReason) -> str:
    """``IterationLimit`` -> ``iteration_limit``: one value per EndReason case."""
    return _CAMEL.sub("_", type(reason).__name__).lower()


def ending(reason: EndReason) -> None:
    """The turn this task ends ends for ``reason`` (read by :func:`turn_ended`)."""
    _END_REASON.set(end_reason_label(reason))
    if isinstance(reason, OverBudget):
        budget_rejected(reason.exceeded.budget, reason.state.tenant_id)


def turn_started(tenant_id: str, mode: str) -> None:
    """A turn was opened."""
    TURNS_STARTED.labels(mode, tenant_label(tenant_id)).inc()


def turn_ended(state: TurnState, status: str) -> None:
    """The turn's ``complete`` was sent with ``status``."""
    TURNS_ENDED.labels(status, _END_REASON.get(), tenant_label(state.tenant_id)).inc()
    TURN_DURATION.labels(status).observe(max(0.0, time.time() - state.started_at))


def round_done(seconds: float) -> None:
    """One round's model call finished."""
    ROUNDS.inc()
    ROUND_DURATION.observe(seconds)


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
    """A ``ChatModel`` that observes every call's duration, time to first token, tokens
    and errors by model."""

    def __init__(self, model: ChatModel):
        self._model = model

    async def stream(self, request: LLMRequest, sink: StreamSink) -> LLMResponse:
        model = model_label(request.model)
        started = time.perf_counter()
        timed = _FirstToken(sink)
        try:
            response = await self._model.stream(request, timed)
        except LLMCallError as exc:
            LLM_ERRORS.labels(model, llm_error_reason(exc)).inc()
            raise
        LLM_REQUEST_DURATION.labels(model).observe(time.perf_counter() - started)
        if timed.first_at is not None:
            LLM_TIME_TO_FIRST_TOKEN.labels(model).observe(timed.first_at - started)
        if response.usage is not None:
            LLM_TOKENS.labels(model, "prompt").inc(response.usage.prompt_tokens)
            LLM_TOKENS.labels(model, "completion").inc(response.usage.completion_tokens)
        return response
