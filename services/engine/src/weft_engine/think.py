"""Think: one streamed LLM call; deltas go to thought / final-answer events (SPEC E-06..E-08)."""

from __future__ import annotations

import asyncio

import structlog
from weft_contracts import FinalAnswerData, FinalAnswerEvent, ThoughtData, ThoughtEvent
from weft_llm import ChatModel, LLMCallError, LLMRequest, LLMResponse

from weft_engine.emitter import EventEmitter
from weft_engine.state import TurnState

log = structlog.get_logger(__name__)


class _EventSink:
    """Streams reasoning as ``thought`` and content as ``final_answer`` deltas."""

    def __init__(self, emitter: EventEmitter, state: TurnState):
        self._emitter = emitter
        self._ids = ids_of(state)
        self._round = state.round

    async def on_reasoning(self, delta: str) -> None:
        await self._emitter.emit(
            ThoughtEvent, self._ids, ThoughtData(round=self._round, delta=delta)
        )

    async def on_content(self, delta: str) -> None:
        await self._emitter.emit(
            FinalAnswerEvent, self._ids, FinalAnswerData(round=self._round, delta=delta)
        )


def ids_of(state: TurnState) -> dict[str, str | None]:
    """Envelope fields that name the turn."""
    return {
        "tenant_id": state.tenant_id,
        "session_id": state.session_id,
        "request_id": state.request_id,
        "traceparent": state.traceparent,
    }


async def think(
    state: TurnState,
    model: ChatModel,
    emitter: EventEmitter,
    tools: list[dict[str, object]],
    backoff_s: tuple[float, ...],
) -> LLMResponse:
    """Call the model, retrying transient failures with ``backoff_s`` pauses (SPEC E-07)."""
    agent = state.agent
    request = LLMRequest(
        model=agent.model,
        messages=state.messages,
        tools=list(tools),
        temperature=agent.temperature,
        max_completion_tokens=agent.max_completion_tokens,
        stall_timeout_s=agent.llm_call_timeout_s,
        tool_choice="none" if not tools else None,
    )
    sink = _EventSink(emitter, state)
    for attempt, pause in enumerate((*backoff_s, None)):
        try:
            return await model.stream(request, sink)
        except LLMCallError as exc:
            if not exc.transient or pause is None:
                raise
            log.warning("llm_retry", attempt=attempt + 1, error=str(exc))
            await asyncio.sleep(pause)
    raise AssertionError("unreachable")
