"""TurnRunner: the loop, one step at a time, continued by whichever replica gets the event.

A step is think -> (final answer | tool calls dispatched | failure). While tools run the
turn lives only in Redis; the result that completes a round advances the turn on the
replica that consumed it. Every exit path ends in exactly one ``complete`` (SPEC E-04).
"""

from __future__ import annotations

import time
from typing import assert_never

import structlog
from weft_contracts import (
    AgentStep,
    ChatRequested,
    CompleteData,
    ErrorData,
    ErrorEvent,
    FinalAnswerData,
    FinalAnswerEvent,
    Reference,
    ReferencesData,
    ReferencesEvent,
    ToolCallCompleted,
    ToolCallCompletedData,
    ToolCallData,
    ToolCallEvent,
    ToolResultData,
    ToolResultEvent,
    Topic,
    TurnStartedData,
    TurnStartedEvent,
    TurnStatus,
)
from weft_llm import ChatModel, LLMCallError
from weft_platform.bus import EventBus
from weft_tools.builtin import SANDBOX_TOOLS, definitions_for

from weft_engine.act import plan_calls
from weft_engine.emitter import EventEmitter
from weft_engine.history import HistoryClient, HistoryUnavailable
from weft_engine.observe import observe
from weft_engine.outcomes import Failed, FinalAnswer, StepOutcome, ToolsDispatched
from weft_engine.prompt import initial_messages
from weft_engine.settings import EngineSettings
from weft_engine.state import StaleTurnState, TurnState, TurnStore
from weft_engine.think import ids_of, think

log = structlog.get_logger(__name__)

EMPTY_ANSWER_FALLBACK = "Sorry, I could not produce an answer. Please rephrase your question."
MAX_ITERATIONS_REQUEST = (
    "You have reached the maximum number of steps. Answer now with what you have gathered."
)
CAS_ATTEMPTS = 5


class TurnRunner:
    """Runs turns from ``agent.requests`` and ``tool.results``."""

    def __init__(
        self,
        *,
        bus: EventBus,
        store: TurnStore,
        emitter: EventEmitter,
        model: ChatModel,
        history: HistoryClient,
        settings: EngineSettings,
    ):
        self._bus = bus
        self._store = store
        self._emitter = emitter
        self._model = model
        self._history = history
        self._settings = settings

    async def on_chat_requested(self, request: ChatRequested) -> None:
        """Start a turn (a redelivered request for a known turn is ignored)."""
        if await self._store.load(request.request_id) is not None:
            return
        data = request.data
        ids = {
            "tenant_id": request.tenant_id,
            "session_id": request.session_id,
            "request_id": request.request_id,
            "traceparent": request.traceparent,
        }
        await self._emitter.emit(
            TurnStartedEvent,
            ids,
            TurnStartedData(
                query=data.query, user_id=data.user_id, agent_id=data.agent.agent_id, mode=data.mode
            ),
        )
        try:
            history = await self._history.load(
                request.tenant_id, request.session_id, data.agent.history_turns
            )
        except HistoryUnavailable as exc:
            await self._end_failed(ids, time.time(), Failed("history_unavailable", str(exc)), [])
            return
        state = TurnState(
            **{k: v for k, v in ids.items() if k != "traceparent"},
            traceparent=request.traceparent,
            user_id=data.user_id,
            agent=data.agent,
            messages=initial_messages(data.agent, history, data.query),
            started_at=time.time(),
        )
        await self._advance(await self._store.save(state))

    async def on_tool_result(self, result: ToolCallCompleted) -> None:
        """Record a result; the one that completes the round advances the turn."""
        for _ in range(CAS_ATTEMPTS):
            state = await self._store.load(result.request_id)
            call_id = result.data.call_id
            if state is None or call_id in state.results:
                return  # finished turn or duplicate result: nothing to do
            if call_id not in {c.call_id for c in state.pending}:
                return
            updated = state.model_copy(update={"results": {**state.results, call_id: result.data}})
            try:
                saved = await self._store.save(updated)
            except StaleTurnState:
                continue
            await self._report_result(saved, result.data)
            if saved.all_results_in():
                await self._advance(await self._store.save(observe(saved)))
            return
        raise StaleTurnState(result.request_id)

    async def _advance(self, state: TurnState) -> None:
        """Step until the turn ends or waits for tools."""
        while True:
            outcome, state = await self._step(state)
            match outcome:
                case FinalAnswer():
                    await self._finish(state, outcome)
                    return
                case Failed():
                    await self._end_failed(ids_of(state), state.started_at, outcome, state.steps)
                    await self._store.delete(state.request_id)
                    return
                case ToolsDispatched():
                    state = await self._dispatch(state, outcome)
                    if not state.all_results_in():
                        return
                    state = await self._store.save(observe(state))
                case _:
                    assert_never(outcome)

    async def _step(self, state: TurnState) -> tuple[StepOutcome, TurnState]:
        agent = state.agent
        tools = definitions_for(agent.allowed_tools)
        if 0 <= agent.max_iterations <= state.round:
            closing = {"role": "user", "content": MAX_ITERATIONS_REQUEST}
            state = state.model_copy(update={"messages": [*state.messages, closing]})
            tools = []
        try:
            response = await think(
                state, self._model, self._emitter, tools, self._settings.llm_retry_backoff_s
            )
        except LLMCallError as exc:
            return Failed("llm_error", str(exc)), state
        if response.tool_calls:
            pending, calls, errors = plan_calls(
                state, response.tool_calls, self._settings.tool_deadline_s
            )
            results = {
                cid: ToolCallCompletedData(
                    call_id=cid,
                    tool_name=next(p.tool_name for p in pending if p.call_id == cid),
                    success=False,
                    error=err,
                )
                for cid, err in errors.items()
            }
            update = {
                "pending": pending,
                "results": results,
                "preamble": response.content,
                "reasoning": response.reasoning,
            }
            return ToolsDispatched(calls), state.model_copy(update=update)
        text = response.content.strip()
        final_step = AgentStep(round=state.round, reasoning=response.reasoning)
        state = state.model_copy(update={"steps": [*state.steps, final_step]})
        if not text:
            return FinalAnswer(EMPTY_ANSWER_FALLBACK, is_fallback=True), state
        return FinalAnswer(text, truncated=response.finish_reason == "length"), state

    async def _dispatch(self, state: TurnState, outcome: ToolsDispatched) -> TurnState:
        ids = ids_of(state)
        for call in state.pending:
            await self._emitter.emit(
                ToolCallEvent,
                ids,
                ToolCallData(
                    round=state.round,
                    call_id=call.call_id,
                    tool_name=call.tool_name,
                    arguments=call.arguments,
                ),
            )
        for early in state.results.values():
            await self._report_result(state, early)
        saved = await self._store.save(state)
        for message in outcome.calls:
            topic = (
                Topic.SANDBOX_CALLS if message.data.tool_name in SANDBOX_TOOLS else Topic.TOOL_CALLS
            )
            await self._bus.publish(topic, message)
        return saved

    async def _report_result(self, state: TurnState, result: ToolCallCompletedData) -> None:
        ids = ids_of(state)
        await self._emitter.emit(
            ToolResultEvent,
            ids,
            ToolResultData(
                round=state.round,
                call_id=result.call_id,
                tool_name=result.tool_name,
                success=result.success,
                output=result.output,
                error=result.error,
                display_type=result.display_type,
                duration_ms=result.duration_ms,
            ),
        )
        refs = [Reference.model_validate(r) for r in result.data.get("references", [])]
        if refs:
            await self._emitter.emit(ReferencesEvent, ids, ReferencesData(references=refs))

    async def _finish(self, state: TurnState, answer: FinalAnswer) -> None:
        ids = ids_of(state)
        if answer.is_fallback:
            await self._emitter.emit(
                FinalAnswerEvent, ids, FinalAnswerData(round=state.round, delta=answer.text)
            )
        await self._emitter.emit(
            FinalAnswerEvent,
            ids,
            FinalAnswerData(round=state.round, delta="", done=True, truncated=answer.truncated),
        )
        await self._emitter.complete(
            ids,
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
        await self._store.delete(state.request_id)

    async def _end_failed(
        self, ids: dict[str, str | None], started_at: float, failure: Failed, steps: list[AgentStep]
    ) -> None:
        log.warning("turn_failed", code=failure.code, error=failure.message, **ids)
        await self._emitter.emit(
            ErrorEvent, ids, ErrorData(code=failure.code, message=failure.message)
        )
        await self._emitter.complete(
            ids,
            CompleteData(
                status=TurnStatus.FAILED,
                steps=steps,
                rounds=len(steps),
                duration_ms=_elapsed_ms(started_at),
            ),
        )


def _elapsed_ms(started_at: float) -> int:
    return max(0, int((time.time() - started_at) * 1000))
