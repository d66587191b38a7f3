"""ResultReporter: tool results into the turn state and onto the event stream (SPEC E-18)."""

from __future__ import annotations

import time

from weft_contracts import (
    Reference,
    ReferencesData,
    ReferencesEvent,
    ToolCallCompleted,
    ToolCallCompletedData,
    ToolResultData,
    ToolResultEvent,
)

from weft_engine.emitter import EventEmitter
from weft_engine.state import StaleTurnState, TurnState, TurnStore
from weft_engine.tracing import TurnTracer

CAS_ATTEMPTS = 5


class ResultReporter:
    """Records results once (a redelivered result changes nothing) and reports them."""

    def __init__(self, store: TurnStore, emitter: EventEmitter, tracer: TurnTracer | None = None):
        self._store = store
        self._emitter = emitter
        self._tracer = tracer or TurnTracer(None)

    async def record(self, result: ToolCallCompleted) -> TurnState | None:
        """Store the result once; the turn's state with it, or None when the result is late
        (its turn ended or moved on). A redelivered result changes nothing and returns the
        state as stored, so its caller can still start a step that a crash prevented."""
        for _ in range(CAS_ATTEMPTS):
            state = await self._store.load(result.request_id)
            call_id = result.data.call_id
            if state is None or call_id not in {c.call_id for c in state.pending}:
                return None
            if call_id in state.results:
                return state
            updated = state.model_copy(update={"results": {**state.results, call_id: result.data}})
            try:
                saved = await self._store.save(updated)
            except StaleTurnState:
                continue
            await self.report(saved, result.data, wait=False)  # the caller flushes
            return saved
        raise StaleTurnState(result.request_id)

    async def report(
        self, state: TurnState, result: ToolCallCompletedData, *, wait: bool = True
    ) -> None:
        """``tool_result`` (and ``references`` when the tool found sources); with
        ``wait=False`` only queued (``EventEmitter.flush`` waits for the acks)."""
        ids = state.ids()
        data = ToolResultData(
            round=state.round,
            call_id=result.call_id,
            tool_name=result.tool_name,
            success=result.success,
            output=result.output,
            error=result.error,
            display_type=result.display_type,
            duration_ms=result.duration_ms,
        )
        await self._emitter.emit(ToolResultEvent, ids, data, wait=wait)
        self._tracer.tool_done(state, result)
        refs = [Reference.model_validate(r) for r in result.data.get("references", [])]
        if refs:
            refs_data = ReferencesData(references=refs)
            await self._emitter.emit(ReferencesEvent, ids, refs_data, wait=wait)

    async def expire_overdue(self, state: TurnState) -> TurnState:
        """SPEC E-17 backstop: a dispatched call past its deadline gets a timeout result,
        whether or not a worker ever answers; the turn goes on."""
        now = time.time()
        overdue = [
            c
            for c in state.pending
            if c.deadline and c.deadline <= now and c.call_id not in state.results
        ]
        if not overdue:
            return state
        timeouts = {
            c.call_id: ToolCallCompletedData(
                call_id=c.call_id,
                tool_name=c.tool_name,
                success=False,
                error=f"{c.tool_name} timed out after {c.timeout_s:.0f}s without a result",
            )
            for c in overdue
        }
        saved = await self._store.save(
            state.model_copy(update={"results": {**state.results, **timeouts}})
        )
        for result in timeouts.values():
            await self.report(saved, result, wait=False)  # the step flushes
        return saved
