"""Finalize: end a turn exactly once, whichever way it ends (SPEC E-04, E-20, E-21)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import structlog
from redis.exceptions import RedisError
from weft_contracts import (
    AgentStep,
    CompleteData,
    ErrorCode,
    ErrorData,
    ErrorEvent,
    FinalAnswerData,
    FinalAnswerEvent,
    TurnStatus,
)
from weft_llm import ContextOverflowError, LLMCallError, ModelStalledError, TransientLLMError
from weft_platform.credentials import outlived

from weft_engine.emitter import EventEmitter
from weft_engine.leases import TurnLeases
from weft_engine.outcomes import Answer
from weft_engine.sessions import START_RETRY_S, HandedOver, SessionGate
from weft_engine.state import TurnState, TurnStore
from weft_engine.tracing import TurnTracer
from weft_engine.turn_cap import TurnCap
from weft_engine.turn_metrics import turn_ended

log = structlog.get_logger(__name__)

StartQueued = Callable[[HandedOver], Awaitable[object]]
"""Opens the turn of a queued request that became its session's running turn."""

CREDENTIAL_MARGIN_S = 30.0
"""A request credential this close to its end is not presented on closing events (a
record is judged at the time it was made: this covers clock skew between services)."""

MODEL_BUSY = "The model is rate-limiting requests. Try again in a moment."
MODEL_UNAVAILABLE = "The model is unavailable right now. Try again in a moment."
MODEL_STALLED = "The model sent no output for {seconds:.0f}s. Try again in a moment."
MODEL_CONTEXT_FULL = (
    "The conversation no longer fits the model's context window. Start a new session or "
    "delete older messages."
)
MODEL_REFUSED = "The model could not process this request."


@dataclass(frozen=True, kw_only=True)
class TurnFailure:
    """Why a turn ends with an ``error`` event: what the client reads, and what only the
    logs and the turn's span keep."""

    code: ErrorCode
    message: str
    """For people: fixed text, never an upstream error's own words."""
    retryable: bool = False
    detail: str = ""
    """The cause as the failing part reported it (provider body, HTTP status, exception)."""


def llm_failure(exc: LLMCallError) -> TurnFailure:
    """A model call that failed for good: a stable code and a clean message by cause; the
    provider's text (it can hold request ids, keys' prefixes, internal hosts) goes to
    ``detail`` only."""
    if exc.status == 429:
        message, retryable = MODEL_BUSY, True
    elif isinstance(exc, ModelStalledError):  # our own timeout, not the provider's words
        message, retryable = MODEL_STALLED.format(seconds=exc.stalled_s), True
    elif isinstance(exc, TransientLLMError):  # 5xx, overloaded, unreachable
        message, retryable = MODEL_UNAVAILABLE, True
    elif isinstance(exc, ContextOverflowError):
        message, retryable = MODEL_CONTEXT_FULL, False
    else:
        message, retryable = MODEL_REFUSED, False
    return TurnFailure(code=ErrorCode.LLM_ERROR, message=message, retryable=retryable,
                       detail=str(exc))  # fmt: skip


class Finisher:
    """Emits the last events of a turn, forgets its state and frees its session."""

    def __init__(
        self,
        *,
        emitter: EventEmitter,
        store: TurnStore,
        leases: TurnLeases,
        sessions: SessionGate,
        tracer: TurnTracer | None = None,
        cap: TurnCap | None = None,
    ):
        self._emitter = emitter
        self._cap = cap
        self._store = store
        self._leases = leases
        self._sessions = sessions
        self._tracer = tracer or TurnTracer(None)
        self.start_queued: StartQueued | None = None
        self.own_credential: Callable[[], str | None] | None = None
        """The engine's service credential for ``agent.events``: the events that end a turn
        whose request credential ran out (a request queued a long time) carry it, so the
        end still reaches its client and memory instead of being dead-lettered."""
        self.persist_scale: Callable[[TurnState], Awaitable[None]] | None = None
        """Stores a token scale measured in the turn (``ContextManager.persist_scale``);
        before the session is handed over, so that its next turn reads it."""

    def _ids(self, state: TurnState) -> dict[str, Any]:
        """The turn's envelope fields for its closing events."""
        ids = state.ids()
        if self.own_credential is not None and outlived(state.credential, CREDENTIAL_MARGIN_S):
            ids["credential"] = self.own_credential()
        return ids

    async def answer(self, state: TurnState, answer: Answer) -> None:
        """The turn ends with a final answer."""
        ids = self._ids(state)
        if answer.is_fallback:  # a fixed text: it was not streamed by the model
            data = FinalAnswerData(round=state.round, delta=answer.text)
            await self._emitter.emit(FinalAnswerEvent, ids, data)
        done = FinalAnswerData(round=state.round, delta="", done=True, truncated=answer.truncated)
        await self._emitter.emit(FinalAnswerEvent, ids, done)
        await self._complete(
            state,
            CompleteData(
                status=TurnStatus.COMPLETED,
                final_answer=answer.text,
                is_fallback=answer.is_fallback,
                truncated=answer.truncated,
                rounds=state.round + 1,
                steps=state.steps,
                duration_ms=_elapsed_ms(state.started_at),
            ),
        )

    async def fail(self, state: TurnState, failure: TurnFailure) -> None:
        """The turn ends with an explicit error, then ``complete`` (status failed). The
        client gets the code and the clean message; the detail stays in logs and spans."""
        log.warning(
            "turn_failed", code=failure.code.value, error=failure.message,
            detail=failure.detail, request_id=state.request_id,
        )  # fmt: skip
        data = ErrorData(
            code=failure.code.value, message=failure.message, retryable=failure.retryable
        )
        await self._emitter.emit(ErrorEvent, self._ids(state), data)
        await self._complete(
            state,
            CompleteData(
                status=TurnStatus.FAILED,
                steps=state.steps,
                rounds=len(state.steps),
                duration_ms=_elapsed_ms(state.started_at),
            ),
            failure=failure,
        )

    async def cancelled(self, state: TurnState) -> None:
        """The user stopped the turn (no rescue synthesis was possible)."""
        await self._complete(
            state,
            CompleteData(
                status=TurnStatus.CANCELLED,
                steps=state.steps,
                rounds=len(state.steps),
                duration_ms=_elapsed_ms(state.started_at),
            ),
        )

    async def _complete(
        self, state: TurnState, data: CompleteData, failure: TurnFailure | None = None
    ) -> None:
        data = data.model_copy(update={"usage": state.metered})
        if await self._emitter.complete(self._ids(state), data):
            error = (failure.code.value, failure.detail or failure.message) if failure else None
            self._tracer.end_turn(state, data.status.value, error=error)
            turn_ended(state, data.status.value)
        if self.persist_scale is not None:
            await self.persist_scale(state)
        await self.forget(state)

    async def forget(self, state: TurnState) -> None:
        """Drop the turn's state, give back its tenant's turn slot and hand its session to
        the next queued request, if any. Every end of a turn comes here (answer, failure,
        stop, deadline, a lost state's recovery)."""
        await self._store.delete(state.request_id)
        await self._leases.clear_deadline(state.request_id)
        await self._emitter.clear_streaming(state.request_id)
        if self._cap is not None:
            await self._cap.release(state.tenant_id, state.request_id)
        await self.pass_on(state.tenant_id, state.session_id, state.request_id)

    async def set_aside(self, state: TurnState) -> None:
        """The turn waits for a person (SPEC H-02): its tenant's turn slot goes back, so
        prompts nobody has answered yet never hold the tenant's other turns back. The turn
        goes on after its decision without taking one again (its slot release at the end
        is then a no-op)."""
        if self._cap is not None:
            await self._cap.release(state.tenant_id, state.request_id)

    async def pass_on(self, tenant_id: str, session_id: str, ended: str) -> None:
        """Hand the session of the ended turn ``ended`` to its next queued request, if any."""
        handed = await self._sessions.hand_over(tenant_id, session_id, ended)
        if handed is not None and self.start_queued is not None:
            await self._start_next(self.start_queued, handed)

    async def _start_next(self, start: StartQueued, handed: HandedOver) -> None:
        """Open the turn ``hand_over`` made the session's running one. The request is a
        pending start in Redis until its turn is open: when opening it fails here (the
        broker away past its window, memory down), any replica starts it again soon
        (``TurnIntake.retry_starts``), so it is never lost, and the ending turn still
        ends."""
        try:
            async with self._sessions.starting(handed):
                await start(handed)
        except Exception as exc:
            log.warning("queued_start_failed", request_id=handed.request.request_id,
                        error=repr(exc))  # fmt: skip
            with contextlib.suppress(RedisError):  # else it is due after its lease
                await self._sessions.postpone(handed, START_RETRY_S)


def final_step(state: TurnState, reasoning: str) -> list[AgentStep]:
    """The steps with the final round's reasoning appended."""
    return [*state.steps, AgentStep(round=state.round, reasoning=reasoning)]


def _elapsed_ms(started_at: float) -> int:
    return max(0, int((time.time() - started_at) * 1000))
