"""A replica killed between reserving an event's ``seq`` and publishing it (invariant 1):
the turn's events still reach clients once each, with seqs 1..n and no gap, after another
replica takes the turn over. Without infrastructure: the engine parts of
``test_engine_loop_outcomes`` (fakeredis with its Lua) and a producer that dies.

A SIGKILL runs no cleanup, so the dying replica's step is never cancelled: its producer
stops sending at the chosen message (that one and every later one never reach Kafka) and
nothing it awaits returns again; the step is left blocked, as a dead process would be.

- ``complete``: the once-only flag was set and the seq reserved, the event never sent.
- a round's text streamed before its tool calls, not yet sent when the calls were saved.
- a result the step stored itself (a timeout, an unacknowledged write's "outcome
  unknown"), its ``tool_result`` never sent.
- the closing events of a turn that ends while it waits for tools (the turn deadline).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Any, cast

import pytest
from weft_contracts import (
    Envelope,
    ToolCallCompleted,
    ToolCallCompletedData,
    Topic,
    TurnStartedData,
    TurnStartedEvent,
)
from weft_engine.emitter import EventEmitter
from weft_engine.keys import outbox_holder_key
from weft_engine.reporting import ResultReporter
from weft_engine.state import TurnState
from weft_llm import LLMResponse
from weft_platform.bus import EventBus
from weft_testkit.function_model import FunctionModel, ModelCall, answer, replies, tool_calls

from tests.unit.test_engine_loop_outcomes import _agent, _Engine, _turn
from tests.unit.test_engine_loop_outcomes import engine as engine  # the same fixture
from tests.unit.test_engine_takeover import _call, _PublishedTrails, _waiting


class _Dead(asyncio.Future[Any]):
    """An ack that never comes; ``awaited`` is set once something waits on it."""

    def __init__(self, awaited: asyncio.Event):
        super().__init__()
        self._awaited = awaited

    def add_done_callback(self, fn: Any, *, context: Any = None) -> None:
        super().add_done_callback(fn, context=context)
        self._awaited.set()


@dataclass
class _DyingBus:
    """A replica's producer that dies with its process at the first message ``dies_at``
    picks: that message and every later one never reach ``kafka`` (the list the live
    replica's bus writes to as well), and their acks never come."""

    kafka: list[tuple[Topic, Envelope]]
    dies_at: Callable[[Envelope], bool]
    dead: bool = False
    blocked: asyncio.Event = field(default_factory=asyncio.Event)
    """Set once the dead replica waits on something that never comes: it does no more."""

    async def publish(self, topic: Topic, message: Envelope) -> None:
        await (await self.publish_nowait(topic, message))

    async def publish_nowait(self, topic: Topic, message: Envelope) -> asyncio.Future[Any]:
        self.dead = self.dead or self.dies_at(message)
        if self.dead:
            return _Dead(self.blocked)
        self.kafka.append((topic, message))
        done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done


def _kind(kind: str) -> Callable[[Envelope], bool]:
    return lambda message: getattr(message, "type", None) == kind


def _stalls(bus: _DyingBus) -> FunctionModel:
    """A model call that never returns (the replica dies while it waits)."""

    async def forever(call: ModelCall) -> LLMResponse:
        bus.blocked.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    return FunctionModel(reply=forever)


Dies = Callable[..., Awaitable[None]]


@pytest.fixture
async def dies(engine: _Engine) -> AsyncIterator[Dies]:
    """``await dies(state, dies_at, model=None, takeover=False)``: run a step of ``state``
    on a replica that dies at the first message ``dies_at`` picks; return once it waits
    on what never comes. Its hold on the turn's outbox has run out by the time its lease
    has (a takeover comes later than ``outbox.HOLD_MS``). The dead steps are left blocked
    until the test is over."""
    dead: list[asyncio.Task[None]] = []

    async def run(
        state: TurnState,
        dies_at: Callable[[Envelope], bool],
        model: FunctionModel | None = None,
        *,
        takeover: bool = False,
    ) -> None:
        bus = _DyingBus(engine.bus.sent, dies_at)
        replica = replace(engine, bus=cast(Any, bus))
        step = asyncio.create_task(replica.step(model or _stalls(bus), state, takeover))
        dead.append(step)
        blocked = asyncio.create_task(bus.blocked.wait())
        done, _ = await asyncio.wait({step, blocked}, timeout=5, return_when="FIRST_COMPLETED")
        if blocked not in done or not bus.dead:
            blocked.cancel()
            raise AssertionError(f"the replica did not die: {step!r}")
        await engine.redis.delete(outbox_holder_key(state.request_id))

    yield run
    for step in dead:  # the test is over: the dead replicas' tasks go with the event loop
        step.cancel()
    await asyncio.gather(*dead, return_exceptions=True)


async def _started(engine: _Engine, state: TurnState) -> TurnState:
    """The turn's ``turn_started`` at seq 1 in Kafka, as ``TurnIntake`` opens a turn."""
    emitter = EventEmitter(cast(EventBus, engine.bus), engine.redis, ttl_s=60)
    started = TurnStartedData(query="Plan my trip.", user_id="u", agent_id="a")
    seqs = await emitter._reserve(state.request_id, 1)
    await emitter.queue_reserved(state.ids(), [(TurnStartedEvent, started)], seqs)
    await emitter.flush(state.request_id)
    return state


def _assert_whole(engine: _Engine, state: TurnState) -> None:
    """Every event once, seqs 1..n without a gap, one ``complete``, last."""
    seqs = [cast(Any, e).seq for e in engine.events(state)]
    kinds = engine.types(state)
    trail = " ".join(f"{k}:{s}" for k, s in zip(kinds, seqs, strict=True))
    assert seqs == list(range(1, len(seqs) + 1)), f"a gap or a repeat: {trail}"
    assert kinds.count("complete") == 1, f"not one complete: {trail}"
    assert kinds[-1] == "complete", f"complete is not last: {trail}"


async def test_a_complete_whose_replica_died_before_sending_it_is_sent_by_the_takeover(
    engine: _Engine, dies: Dies
) -> None:
    """The once-only flag says the turn completed, so the takeover forgets the turn: the
    ``complete`` must not be lost with the replica (clients would wait forever)."""
    engine.trails = _PublishedTrails(engine.bus)
    state = await _started(engine, await _turn(engine))
    await dies(state, _kind("complete"), replies(answer("Take the train.")))
    await engine.step(replies(), state, takeover=True)
    _assert_whole(engine, state)
    assert engine.complete(state).final_answer == "Take the train."


async def test_text_streamed_before_the_rounds_tool_calls_is_not_lost(
    engine: _Engine, dies: Dies
) -> None:
    """The round's preamble was queued, and the replica died before its producer sent it.
    Had the write that saves the round's tool calls (and makes the turn wait) gone
    through, the takeover would publish them from the outbox at seqs past a hole and keep
    the text in the steps: that write waits for the text's ack, so the round runs again."""
    engine.trails = _PublishedTrails(engine.bus)
    agent = _agent(allowed_tools=["web_search"])
    state = await _started(engine, await _turn(engine, agent))
    search = tool_calls(("web_search", {"query": "Lisbon"}), content="Let me look that up.")
    await dies(state, _kind("final_answer"), replies(search))
    await engine.step(replies(search), state, takeover=True)
    await _answer_call(engine, state, "call_0")
    await engine.step(replies(answer("Trains run hourly.")), state)
    _assert_whole(engine, state)
    answers = engine.data(state, "final_answer")
    kept = "".join(a.delta for a in answers if not a.superseded)
    assert kept == "Let me look that up.Trains run hourly."


async def _answer_call(engine: _Engine, state: TurnState, call_id: str) -> None:
    """A tool worker's result, recorded by another replica's consumer."""
    emitter = EventEmitter(cast(EventBus, engine.bus), engine.redis, ttl_s=60)
    result = ToolCallCompleted(
        **state.ids(),
        data=ToolCallCompletedData(
            call_id=call_id, tool_name="web_search", success=True, output="Trains hourly."
        ),
    )
    recorded = await ResultReporter(engine.store, emitter).record(result)
    assert recorded is not None
    await emitter.flush(state.request_id)


async def test_a_timeout_the_step_recorded_is_reported_after_its_replica_died(
    engine: _Engine, dies: Dies
) -> None:
    """SPEC E-17: the step gave the overdue call its timeout result in the state, then died
    before its ``tool_result`` left; the takeover thinks from that result, so clients
    must get it too."""
    engine.trails = _PublishedTrails(engine.bus)
    overdue = _call("c1", "web_search", read_only=True).model_copy(
        update={"deadline": time.time() - 1}
    )
    state = await _started(engine, await _waiting(engine, overdue))
    await dies(state, _kind("tool_result"))
    await engine.step(replies(answer("No answer in time.")), state, takeover=True)
    _assert_whole(engine, state)
    [result] = engine.data(state, "tool_result")
    assert result.call_id == "c1" and "timed out" in (result.error or "")


async def test_an_uncertain_write_prompt_is_reported_after_its_replica_died(
    engine: _Engine, dies: Dies
) -> None:
    """Invariant 3, SPEC H-05: a takeover asked a person about an unacknowledged write
    (the prompt in the state), then died before the ``tool_approval_required`` left; the
    next takeover must not lose it (a person must see it) nor ask twice."""
    engine.trails = _PublishedTrails(engine.bus)
    write = _call("w1", "shell_exec", read_only=False)
    state = await _started(engine, await _waiting(engine, write))
    await dies(state, _kind("tool_approval_required"), takeover=True)
    await engine.step(replies(), state, takeover=True)
    seqs = [cast(Any, e).seq for e in engine.events(state)]
    assert seqs == list(range(1, len(seqs) + 1)), "a gap or a repeat"
    assert engine.types(state) == ["turn_started", "tool_approval_required"], "it waits"
    [prompt] = engine.data(state, "tool_approval_required")
    assert (prompt.call_id, prompt.kind) == ("w1", "uncertain_outcome")
    assert engine.data(state, "tool_result") == []


async def test_the_closing_events_of_a_waiting_turn_leave_no_gap(
    engine: _Engine, dies: Dies
) -> None:
    """SPEC E-20: the turn deadline passed while the turn waited for a call; the step's
    ``error`` was reserved and never sent. The takeover of a turn still waiting counts on
    from the last event Kafka holds too."""
    engine.trails = _PublishedTrails(engine.bus)
    call = _call("c1", "web_search", read_only=True)
    waiting = await _turn(
        engine, _agent(allowed_tools=["web_search"]), phase="waiting", pending=[call],
        groups=[["c1"]], dispatched_groups=1, deadline_at=time.time() - 1,
    )  # fmt: skip
    state = await _started(engine, waiting)
    await dies(state, _kind("error"))
    await engine.step(replies(), state, takeover=True)
    _assert_whole(engine, state)
    assert engine.types(state) == ["turn_started", "error", "complete"]
