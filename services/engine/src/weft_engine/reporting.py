"""ResultReporter: tool results into the turn state and onto the event stream (SPEC E-18)."""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError
from weft_contracts import (
    DeliverableData,
    DeliverableEvent,
    Envelope,
    Reference,
    ReferencesData,
    ReferencesEvent,
    ToolCallCompleted,
    ToolCallCompletedData,
    ToolResultData,
    ToolResultEvent,
)
from weft_contracts.files import download_path

from weft_engine.emitter import EventEmitter
from weft_engine.leases import DeadlineUpdate, LeaseRequest, StepClaim
from weft_engine.outbox import SeqsHeld
from weft_engine.state import StaleTurnState, TurnState, TurnStore
from weft_engine.tracing import TurnTracer

CAS_ATTEMPTS = 5


@dataclass(frozen=True)
class Recorded:
    """A recorded result's turn, and the step's lease when the write that recorded the
    round's last result took it."""

    state: TurnState
    claim: StepClaim | None = None


class ResultReporter:
    """Records results once (a redelivered result changes nothing) and reports them."""

    def __init__(self, store: TurnStore, emitter: EventEmitter, tracer: TurnTracer | None = None):
        self._store = store
        self._emitter = emitter
        self._tracer = tracer or TurnTracer(None)

    async def record(
        self, result: ToolCallCompleted, lease: LeaseRequest | None = None
    ) -> Recorded | None:
        """Store the result once; the turn with it, or None when the result is late (its
        turn ended or moved on). A redelivered result changes nothing and returns the turn
        as stored, so its caller can still start a step that a crash prevented.

        The same write reserves the ``seq`` of the result's events and stores them in the
        turn's outbox (queued, the caller flushes: the ack takes them out again; a replica
        that dies before leaves them to the next one that reserves a seq, ``outbox``).
        Given ``lease``, when this is the last result the turn waits for, it also takes the
        step's lease (one round trip from result to next step)."""
        for _ in range(CAS_ATTEMPTS):
            state = await self._store.load(result.request_id)
            sent = result.data.call_id
            call = None if state is None else state.call_sent_as(sent)
            if state is None or call is None:
                return None
            call_id = call.call_id  # a call run again (SPEC H-05) answers under another id
            if call_id in state.results:
                return Recorded(state)
            data = result.data if sent == call_id else result.data.model_copy(
                update={"call_id": call_id}
            )  # fmt: skip
            updated = state.model_copy(update={"results": {**state.results, call_id: data}})
            envelopes, outbox = self._emitter.stage(updated.ids(), _result_events(updated, data))
            claim = None
            try:
                if lease is not None and updated.tools_answered():
                    saved, seqs, claim = await self._store.save_claiming(
                        updated, len(envelopes), lease, outbox=outbox
                    )
                else:
                    saved, seqs = await self._store.save_reserving(
                        updated, len(envelopes), outbox=outbox
                    )
            except SeqsHeld:
                await self._emitter.drain(result.request_id)  # earlier seqs go out first
                continue
            except StaleTurnState:
                continue
            await self._emitter.queue_outboxed(envelopes, seqs)  # the caller flushes
            self._tracer.tool_done(saved, data)
            return Recorded(saved, claim)
        raise StaleTurnState(result.request_id)

    async def report(self, state: TurnState, result: ToolCallCompletedData) -> None:
        """Queue ``tool_result`` (and ``references`` when the tool found sources) with one
        ``seq`` round trip; ``EventEmitter.flush`` waits for the acks. Only for a result
        the stored state does not hold yet (a round that is thought again after a crash
        reports it again): one it holds is reported by the write that stores it
        (:meth:`save_reporting`)."""
        await self._emitter.emit_many(state.ids(), _result_events(state, result))
        self._tracer.tool_done(state, result)

    async def save_reporting(
        self,
        state: TurnState,
        results: Iterable[ToolCallCompletedData],
        *,
        before: list[tuple[Any, Any]] | None = None,
        deadline: DeadlineUpdate | None = None,
    ) -> tuple[TurnState, tuple[list[Envelope], range]]:
        """Write ``state``, which holds ``results``, and in the same write reserve the
        seqs of their events (after the events ``before``, a round's ``tool_call``) and
        store them in the turn's outbox: a replica that dies after the write leaves them
        to whoever reserves the turn's next seq, so a result the state holds always
        reaches clients (``outbox``). The caller queues them
        (``EventEmitter.queue_outboxed``) when it is ready and flushes."""
        results = list(results)
        events = [*(before or []), *(e for r in results for e in _result_events(state, r))]
        staged, outbox = self._emitter.stage(state.ids(), events)
        while True:
            try:
                saved, seqs = await self._store.save_reserving(
                    state, len(staged), deadline=deadline, outbox=outbox if staged else None
                )
                break
            except SeqsHeld:
                await self._emitter.drain(state.request_id)  # earlier seqs go out first
        for result in results:
            self._tracer.tool_done(saved, result)
        return saved, (staged, seqs)

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
        updated = state.model_copy(update={"results": {**state.results, **timeouts}})
        saved, reported = await self.save_reporting(updated, timeouts.values())
        await self._emitter.queue_outboxed(*reported)  # the step flushes
        return saved


MAX_DELIVERABLES = 50
"""Deliverable events one result announces at most (a command may write thousands)."""


def _result_events(state: TurnState, result: ToolCallCompletedData) -> list[tuple[Any, Any]]:
    """``tool_result``, then ``references`` when the tool found sources, then one
    ``deliverable`` per file the sandbox reports new or changed under /workspace/output."""
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
    events: list[tuple[Any, Any]] = [(ToolResultEvent, data)]
    refs = [Reference.model_validate(r) for r in result.data.get("references", [])]
    if refs:
        events.append((ReferencesEvent, ReferencesData(references=refs)))
    events += [(DeliverableEvent, d) for d in _deliverables(state, result)]
    return events


def _deliverables(state: TurnState, result: ToolCallCompletedData) -> list[DeliverableData]:
    """The result's ``data.deliverables`` (``[{path, size}]``) as event payloads; an entry
    that is not one is left out, never a failed result."""
    reported = result.data.get("deliverables")
    if not isinstance(reported, list):
        return []
    found = []
    for entry in reported[:MAX_DELIVERABLES]:
        if not isinstance(entry, dict) or not isinstance(entry.get("path"), str):
            continue
        try:
            found.append(
                DeliverableData(
                    call_id=result.call_id, tool_name=result.tool_name, path=entry["path"],
                    size=entry.get("size", 0),
                    download_path=download_path(state.session_id, entry["path"]),
                )
            )  # fmt: skip
        except ValidationError:
            continue
    return found
