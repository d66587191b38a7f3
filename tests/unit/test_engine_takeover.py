"""A replica takes a turn over from one that stopped (invariants 2 and 3), without
infrastructure: the engine parts of ``test_engine_loop_outcomes`` (fakeredis with its Lua,
a bus that keeps what it is given, ``weft_testkit.function_model``).

- Calls whose dispatch no replica saw Kafka acknowledge: a read-only one is sent again
  with its call id, a write one is never sent again on its own: a person decides whether
  it runs again (under a new id) or is skipped ("outcome unknown", SPEC H-05); calls
  recorded as acknowledged (by the write that releases the step's lease) are left alone.
- A round that was streaming when its replica stopped is closed by the rerun marker and
  thought again; the turn keeps one ``complete`` and none of the discarded text.
- Seqs the stopped replica reserved but never published are handed out again: the events
  clients get count on from the last one Kafka holds, without a gap.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, cast

import pytest
from weft_contracts import (
    OUTCOME_UNKNOWN,
    ApprovalDecided,
    ApprovalDecidedData,
    ToolCallCompleted,
    ToolCallCompletedData,
    Topic,
)
from weft_engine.approvals import Suspensions, settle, unpack
from weft_engine.emitter import EventEmitter
from weft_engine.keys import acked_key
from weft_engine.leases import AckedDispatch
from weft_engine.reporting import ResultReporter
from weft_engine.state import PendingCall, TurnState
from weft_engine.trails import TurnRef, TurnTrail
from weft_llm import LLMRequest, LLMResponse, StreamSink
from weft_testkit.function_model import answer, replies, tool_calls

from tests.unit.test_engine_loop_outcomes import _agent, _Bus, _Engine, _turn
from tests.unit.test_engine_loop_outcomes import engine as engine  # the same fixture


def _call(call_id: str, tool: str, *, read_only: bool) -> PendingCall:
    return PendingCall(
        call_id=call_id, tool_name=tool, arguments={"query": "Lisbon"},
        arguments_json='{"query": "Lisbon"}', read_only=read_only,
        deadline=time.time() + 30,
    )  # fmt: skip


async def _waiting(engine: _Engine, *calls: PendingCall, round_: int = 0) -> TurnState:
    """A turn that dispatched ``calls`` as one group and waits for them."""
    return await _turn(
        engine, _agent(allowed_tools=["web_search"]), phase="waiting", round=round_,
        pending=list(calls), groups=[[c.call_id for c in calls]], dispatched_groups=1,
    )  # fmt: skip


async def _acked(engine: _Engine, request_id: str, round_: int, groups: int) -> None:
    """A step that saw Kafka acknowledge the round's first ``groups`` groups ended."""
    engine.leases.note_acked(request_id, AckedDispatch(round_, groups))
    await engine.leases.release(request_id)


def _tool_calls_sent(engine: _Engine) -> list[Any]:
    return [cast(Any, m).data for t, m in engine.bus.sent if t is not Topic.AGENT_EVENTS]


# --- no lost tool call ------------------------------------------------------------------


async def test_an_unacknowledged_read_only_call_is_sent_again_with_its_call_id(
    engine: _Engine,
) -> None:
    """Invariant 3: a read-only call may run twice, so a takeover that cannot know it
    left sends it again, same id (its result is recorded once), with a fresh deadline;
    the turn waits for it, no fabricated timeout."""
    state = await _waiting(engine, _call("c1", "web_search", read_only=True))
    model = replies()
    await engine.step(model, state, takeover=True)
    [sent] = _tool_calls_sent(engine)
    assert (sent.call_id, sent.tool_name, sent.arguments) == (
        "c1",
        "web_search",
        {"query": "Lisbon"},
    )
    stored = await engine.store.load(state.request_id)
    assert stored is not None and stored.phase == "waiting" and stored.results == {}
    assert stored.pending[0].deadline > state.pending[0].deadline  # from the takeover on
    assert model.calls == [] and "tool_result" not in engine.types(state)
    await engine.leases.release(state.request_id)  # what the scheduler does at step end
    assert await engine.redis.get(acked_key(state.request_id)) == b"0:1"


async def test_an_unacknowledged_write_call_asks_a_person_and_is_never_resent(
    engine: _Engine,
) -> None:
    """Invariant 3, SPEC H-05: a write whose dispatch is uncertain is never replayed on its
    own: a person is asked ("this may have run: run again, or skip?"); skipping it gives
    the model the stable "outcome unknown" text and the turn goes on."""
    write = _call("w1", "write_sandbox_file", read_only=False)
    searched = ToolCallCompletedData(call_id="c1", tool_name="web_search", success=True,
                                     output="Lisbon: sunny.")  # fmt: skip
    state = await _waiting(engine, _call("c1", "web_search", read_only=True), write)
    update = {"groups": [["c1"], ["w1"]], "dispatched_groups": 2, "results": {"c1": searched}}
    state = await engine.store.save(state.model_copy(update=update))
    await _acked(engine, state.request_id, 0, 1)
    model = replies(answer("I could not confirm the file was written."))
    await engine.step(model, state, takeover=True)
    assert _tool_calls_sent(engine) == [], "a write was sent again"
    [prompt] = engine.data(state, "tool_approval_required")
    assert (prompt.call_id, prompt.kind) == ("w1", "uncertain_outcome")
    assert engine.data(state, "tool_result") == [] and model.calls == []
    waiting = await engine.store.load(state.request_id)
    assert waiting is not None and waiting.waiting_on_person()

    skip = _decision(waiting, "w1", "deny")
    saved = await engine.loop(model).tool_round.apply_decision(
        settle(waiting, skip, time.time()), None
    )
    assert saved.tools_answered()
    await engine.leases.release(state.request_id)
    await engine.step(model, saved)
    [result] = engine.data(state, "tool_result")
    assert result.call_id == "w1" and not result.success
    assert (result.error or "").startswith(OUTCOME_UNKNOWN)
    told = [m for m in model.requests[0].messages if m.get("tool_call_id") == "w1"]
    assert told and OUTCOME_UNKNOWN in str(told[0]["content"])
    assert engine.complete(state).final_answer == "I could not confirm the file was written."


async def test_a_write_approved_to_run_again_goes_out_under_a_new_id(engine: _Engine) -> None:
    """SPEC H-05: "run again" sends the call under a new id (a worker takes an id it saw
    for a redelivery and would never run it), and its result is recorded under the id the
    model knows."""
    write = _call("w1", "write_sandbox_file", read_only=False)
    state = await _waiting(engine, write)
    model = replies(answer("Written."))
    await engine.step(model, state, takeover=True)
    waiting = await engine.store.load(state.request_id)
    assert waiting is not None
    again = _decision(waiting, "w1", "approve")
    loop = engine.loop(model)
    await loop.tool_round.apply_decision(settle(waiting, again, time.time()), None)
    [sent] = _tool_calls_sent(engine)
    assert sent.call_id != "w1" and sent.call_id.startswith("w1~again.")
    stored = await engine.store.load(state.request_id)
    assert stored is not None and stored.approvals["w1"].status == "dispatched", (
        "sent under its new id and recorded sent: a takeover must not ask about it again"
    )
    reporter = ResultReporter(engine.store, EventEmitter(cast(Any, engine.bus), engine.redis, 60))
    done = ToolCallCompleted(
        tenant_id=state.tenant_id, session_id=state.session_id, request_id=state.request_id,
        data=ToolCallCompletedData(call_id=sent.call_id, tool_name="write_sandbox_file",
                                   success=True, output="written"),
    )  # fmt: skip
    recorded = await reporter.record(done)
    assert recorded is not None and recorded.state.results["w1"].output == "written"
    assert recorded.state.results["w1"].call_id == "w1"


class _Memory:
    """memory's suspension route: what was put, and how many events had left by then."""

    def __init__(self, engine: _Engine) -> None:
        self.engine = engine
        self.puts: list[tuple[TurnState, int]] = []

    async def put_suspension(self, state: TurnState, blob: str) -> None:
        self.puts.append((unpack(blob), len(self.engine.bus.sent)))

    async def get_suspension(self, request_id: str, credential: str | None) -> None:
        return None

    async def delete_suspension(self, state: TurnState) -> None:
        pass


async def test_a_takeovers_question_is_kept_by_memory_before_it_is_asked(
    engine: _Engine,
) -> None:
    """SPEC H-02, H-05: the state of a turn a takeover leaves waiting for a person reaches
    memory before the prompt is published: a Redis lost right after it loses no turn."""
    memory = _Memory(engine)
    engine.suspensions = Suspensions(memory)
    state = await _waiting(engine, _call("w1", "write_sandbox_file", read_only=False))
    await engine.step(replies(), state, takeover=True)
    [prompt] = engine.data(state, "tool_approval_required")
    [(kept, sent_before)] = memory.puts
    assert kept.approvals["w1"].prompt_id == prompt.prompt_id and kept.waiting_on_person()
    asked_at = next(
        i for i, (_, m) in enumerate(engine.bus.sent)
        if cast(Any, m).type == "tool_approval_required"
    )  # fmt: skip
    assert sent_before <= asked_at, "the prompt left before memory kept the turn"


def _decision(state: TurnState, call_id: str, decision: str) -> ApprovalDecided:
    return ApprovalDecided(
        tenant_id=state.tenant_id, session_id=state.session_id, request_id=state.request_id,
        data=ApprovalDecidedData(
            prompt_id=state.approvals[call_id].prompt_id, call_id=call_id,
            decision=decision,
            decided_by="u", decided_at=datetime.now(UTC),
        ),
    )  # fmt: skip


async def test_acknowledged_calls_are_not_sent_again(engine: _Engine) -> None:
    """A takeover of a turn whose calls Kafka acknowledged (recorded when the step that
    sent them released its lease) only waits for them."""
    state = await _turn(engine, _agent(allowed_tools=["web_search"]))
    await engine.step(replies(tool_calls(("web_search", {"query": "trains"}))), state)
    await engine.leases.release(state.request_id)  # the step's end records the acks
    sent = len(engine.bus.sent)
    await engine.step(replies(), state, takeover=True)
    assert len(engine.bus.sent) == sent
    stored = await engine.store.load(state.request_id)
    assert stored is not None and stored.phase == "waiting" and stored.results == {}


async def test_an_acknowledgement_of_an_earlier_round_does_not_count(engine: _Engine) -> None:
    """The record names its round: round 0's acks say nothing of round 1's calls."""
    state = await _waiting(engine, _call("c1", "web_search", read_only=True), round_=1)
    await _acked(engine, state.request_id, 0, 1)
    await engine.step(replies(), state, takeover=True)
    assert [c.call_id for c in _tool_calls_sent(engine)] == ["c1"]


async def test_a_call_waited_for_by_a_dead_replica_gets_no_fabricated_timeout(
    engine: _Engine,
) -> None:
    """SPEC E-17: past the dead replica's deadline, an unacknowledged call is sent again,
    not answered "timed out"."""
    call = _call("c1", "web_search", read_only=True).model_copy(
        update={"deadline": time.time() - 1}
    )
    state = await _waiting(engine, call)
    await engine.step(replies(), state, takeover=True)
    assert [c.call_id for c in _tool_calls_sent(engine)] == ["c1"]
    assert "tool_result" not in engine.types(state)


# --- a replica stops while the answer streams -----------------------------------------


class _StallsMidAnswer:
    """A model that streams the start of an answer, then never returns: the replica
    running it is about to stop."""

    def __init__(self) -> None:
        self.streamed = asyncio.Event()

    async def stream(self, request: LLMRequest, sink: StreamSink) -> LLMResponse:
        await sink.on_reasoning("Fly, then")
        await sink.on_content("Fly to Lisbon and")
        self.streamed.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")


async def test_a_takeover_discards_the_half_streamed_round_and_runs_it_again(
    engine: _Engine,
) -> None:
    """Invariant 2: the replica streaming round 0 stops (its step is cut, nothing cleans
    up); the one that takes over first sends the rerun marker for round 0, then thinks
    the round again: one complete, whose answer and steps hold none of the first text."""
    state = await _turn(engine)
    stalled = _StallsMidAnswer()
    first = asyncio.create_task(engine.step(cast(Any, stalled), state))
    await asyncio.wait_for(stalled.streamed.wait(), 5)
    first.cancel()  # the replica stops mid-stream
    with pytest.raises(asyncio.CancelledError):
        await first
    await engine.step(replies(answer("Take the train to Lisbon.")), state, takeover=True)
    events = engine.events(state)
    kinds = [cast(Any, e).type for e in events]
    assert kinds.count("complete") == 1 and kinds[-1] == "complete"
    answers = engine.data(state, "final_answer")
    [marker] = [i for i, a in enumerate(answers) if a.superseded]
    assert (answers[marker].superseded_by, answers[marker].round) == ("rerun", 0)
    assert "".join(a.delta for a in answers[:marker]) == "Fly to Lisbon and"
    complete = engine.complete(state)
    assert "".join(a.delta for a in answers[marker + 1 :]) == complete.final_answer
    assert complete.final_answer == "Take the train to Lisbon."
    assert "Fly" not in complete.model_dump_json()


async def test_a_round_whose_tool_calls_were_saved_keeps_its_text(engine: _Engine) -> None:
    """A replica that stopped after saving the round's tool calls (its text is the round's
    preamble, kept in the steps) but before settling the streaming flag: no marker."""
    state = await _waiting(engine, _call("c1", "web_search", read_only=True))
    await _acked(engine, state.request_id, 0, 1)
    await engine.redis.set(f"weft:turn:{state.request_id}:streaming", 0)
    await engine.step(replies(), state, takeover=True)
    assert engine.data(state, "final_answer") == []
    assert not await engine.redis.exists(f"weft:turn:{state.request_id}:streaming")


async def test_a_saved_round_keeps_its_text_when_the_next_one_starts(engine: _Engine) -> None:
    """Round 0 streamed, then its tool calls and their results were stored: a takeover
    that thinks round 1 sends no marker (round 0's text is the step's thought)."""
    result = ToolCallCompletedData(call_id="c1", tool_name="web_search", success=True,
                                   output="Trains hourly.")  # fmt: skip
    state = await _waiting(engine, _call("c1", "web_search", read_only=True))
    state = await engine.store.save(state.model_copy(update={"results": {"c1": result}}))
    await engine.redis.set(f"weft:turn:{state.request_id}:streaming", 0)
    await engine.step(replies(answer("Trains run hourly.")), state, takeover=True)
    assert [a.superseded for a in engine.data(state, "final_answer")] == [False] * len(
        engine.data(state, "final_answer")
    )
    assert engine.complete(state).final_answer == "Trains run hourly."


async def test_a_rerun_after_the_tools_answered_thinks_the_next_round_again(
    engine: _Engine,
) -> None:
    """The step after a tool round streams round 1 from a state still stored as waiting
    (the observed state is not written): the takeover observes again and reruns round 1."""
    result = ToolCallCompletedData(call_id="c1", tool_name="web_search", success=True,
                                   output="Trains hourly.")  # fmt: skip
    state = await _waiting(engine, _call("c1", "web_search", read_only=True))
    state = await engine.store.save(state.model_copy(update={"results": {"c1": result}}))
    await engine.redis.set(f"weft:turn:{state.request_id}:streaming", 1)
    await engine.step(replies(answer("Trains run hourly.")), state, takeover=True)
    answers = engine.data(state, "final_answer")
    assert (answers[0].superseded_by, answers[0].round) == ("rerun", 1)
    assert engine.complete(state).final_answer == "Trains run hourly."


class _PublishedTrails:
    """The trail of what the bus was given (the topic, as a takeover reads it back)."""

    def __init__(self, bus: _Bus):
        self._bus = bus

    async def read(self, turns: Sequence[TurnRef]) -> dict[str, TurnTrail]:
        trails = {}
        for turn in turns:
            seqs = [cast(Any, m).seq for t, m in self._bus.sent
                    if t is Topic.AGENT_EVENTS and m.request_id == turn.request_id]  # fmt: skip
            trails[turn.request_id] = TurnTrail(last_seq=max(seqs, default=0))
        return trails


@pytest.mark.parametrize("with_trails", [True, False], ids=["read-back", "no-read-back"])
async def test_seqs_reserved_by_the_stopped_replica_leave_no_gap(
    engine: _Engine, with_trails: bool
) -> None:
    """Invariant 1: the replica streaming round 0 reserved two more seqs (deltas it never
    published) when it stopped; the takeover reads the turn back from the topic and counts
    on from its last event. Without the read back, clients would see the gap (the
    ``no-read-back`` case shows the test can tell)."""
    engine.trails = _PublishedTrails(engine.bus) if with_trails else None
    state = await _turn(engine)
    stalled = _StallsMidAnswer()
    first = asyncio.create_task(engine.step(cast(Any, stalled), state))
    await asyncio.wait_for(stalled.streamed.wait(), 5)
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    await engine.redis.incrby(f"weft:turn:{state.request_id}:seq", 2)
    await engine.step(replies(answer("Take the train to Lisbon.")), state, takeover=True)
    seqs = [cast(Any, e).seq for e in engine.events(state)]
    contiguous = seqs == list(range(seqs[0], seqs[0] + len(seqs)))
    assert contiguous is with_trails, seqs
