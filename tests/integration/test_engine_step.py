"""One step of a turn on the real Redis, with a scripted in-process model: a steer message
that waits when the tools' results come back joins the next LLM call; when none waits, the
step does not poll the inbox before thinking (SPEC E-13, issue 3). A step starts from the
state its submitter holds when nobody wrote the turn since, and reloads it otherwise; a
redelivered tool result still starts the step a crash left unrun."""

from __future__ import annotations

import asyncio
import secrets
import time
from typing import Any

from redis.asyncio import Redis
from weft_context import MemoryClient
from weft_contracts import (
    AgentConfig,
    Envelope,
    ToolCallCompleted,
    ToolCallCompletedData,
    Topic,
)
from weft_engine.context import ContextManager
from weft_engine.emitter import EventEmitter
from weft_engine.finalize import Finisher
from weft_engine.leases import TurnLeases
from weft_engine.loop import MAX_TAKEOVERS, TurnLoop
from weft_engine.reporting import ResultReporter
from weft_engine.scheduler import StepScheduler, StepStart
from weft_engine.sessions import SessionGate, SteerInbox
from weft_engine.state import PendingCall, StaleTurnState, TurnState, TurnStore
from weft_engine.think import ThinkSettings
from weft_engine.token_cache import CachedTokenEstimator
from weft_llm import LLMRequest, LLMResponse, StreamSink


class _Bus:
    """Acks every event at once; keeps what was published."""

    def __init__(self) -> None:
        self.sent: list[Envelope] = []

    async def publish(self, topic: Topic, message: Envelope) -> None:
        self.sent.append(message)

    async def publish_nowait(self, topic: Topic, message: Envelope) -> asyncio.Future[Any]:
        self.sent.append(message)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        future.set_result(None)
        return future


class _Model:
    """Answers every call with a short text and remembers the messages it was sent."""

    def __init__(self) -> None:
        self.requests: list[LLMRequest] = []

    async def stream(self, request: LLMRequest, sink: StreamSink) -> LLMResponse:
        self.requests.append(request)
        await sink.on_content("Done.")
        return LLMResponse(content="Done.", reasoning="", tool_calls=[], finish_reason="stop")


class _CountingInbox(SteerInbox):
    def __init__(self, redis: Redis, ttl_s: int) -> None:
        super().__init__(redis, ttl_s)
        self.polls = 0

    async def poll(self, request_id: str, cancel_key: str) -> tuple[bool, list[str]]:
        self.polls += 1
        return await super().poll(request_id, cancel_key)


class _CountingStore(TurnStore):
    def __init__(self, redis: Redis, ttl_s: int) -> None:
        super().__init__(redis, ttl_s)
        self.loads = 0

    async def load(self, request_id: str) -> TurnState | None:
        self.loads += 1
        return await super().load(request_id)


def _loop(
    redis: Redis, model: _Model, inbox: SteerInbox, bus: _Bus, store: TurnStore | None = None
) -> TurnLoop:
    store = store or TurnStore(redis, ttl_s=60)
    emitter = EventEmitter(bus, redis, ttl_s=60)  # type: ignore[arg-type]
    leases = TurnLeases(redis, owner="r1", namespace=f"t{secrets.token_hex(4)}.", ttl_s=6)
    context = ContextManager(
        memory=MemoryClient(base_url="http://127.0.0.1:9"), model=model, emitter=emitter,
        estimator=CachedTokenEstimator(),
    )  # fmt: skip
    finisher = Finisher(
        emitter=emitter, store=store, leases=leases, sessions=SessionGate(redis, 60)
    )
    return TurnLoop(
        bus=bus, redis=redis, store=store, emitter=emitter, model=model, finisher=finisher,  # type: ignore[arg-type]
        reporter=ResultReporter(store, emitter), inbox=inbox, leases=leases, context=context,
        think_settings=ThinkSettings(), tool_timeout_s=60,
    )  # fmt: skip


async def _run_step(loop: TurnLoop, request_id: str, known: TurnState | None = None) -> None:
    """What the scheduler does: claim the lease, then run the step with what it read."""
    claim = await loop._leases.claim_step(request_id)
    assert claim is not None
    await loop.run_step(StepStart(request_id, False, claim, known))


async def _waiting_turn(redis: Redis) -> TurnState:
    """A turn whose only tool call has its result: the next step observes and thinks."""
    state = TurnState(
        tenant_id="t", session_id=f"s_{secrets.token_hex(4)}",
        request_id=f"req_{secrets.token_hex(6)}", user_id="u",
        agent=AgentConfig(agent_id="a", model="m", allowed_tools=["thinking"]),
        messages=[{"role": "user", "content": "Plan my trip."}], started_at=time.time(),
        phase="waiting", groups=[["c1"]], dispatched_groups=1,
        pending=[PendingCall(call_id="c1", tool_name="thinking", arguments={},
                             arguments_json="{}")],
        results={"c1": ToolCallCompletedData(call_id="c1", tool_name="thinking", success=True,
                                             output="noted")},
    )  # fmt: skip
    return await TurnStore(redis, ttl_s=60).save(state)


async def test_a_steer_waiting_when_results_arrive_joins_the_next_llm_call(redis: Redis) -> None:
    """SPEC E-13: the steer sent while the tools ran is the last message the model reads."""
    model, inbox, bus = _Model(), _CountingInbox(redis, 60), _Bus()
    state = await _waiting_turn(redis)
    await inbox.put(state.request_id, "Also check the train prices.")
    await _run_step(_loop(redis, model, inbox, bus), state.request_id)
    sent = model.requests[0].messages
    assert [m["role"] for m in sent[-3:]] == ["assistant", "tool", "user"]
    assert sent[-1]["content"] == "Also check the train prices."
    assert inbox.polls == 1
    assert [e.type for e in bus.sent][-1] == "complete"


async def test_without_a_waiting_steer_the_step_thinks_without_polling(redis: Redis) -> None:
    """Issue 3: the step's load already saw no stop flag and an empty inbox."""
    model, inbox, bus = _Model(), _CountingInbox(redis, 60), _Bus()
    state = await _waiting_turn(redis)
    await _run_step(_loop(redis, model, inbox, bus), state.request_id)
    assert inbox.polls == 0
    assert model.requests[0].messages[-1]["role"] == "tool"
    assert [e.type for e in bus.sent][-1] == "complete"


async def test_a_step_starts_from_the_submitters_state_without_loading_it(redis: Redis) -> None:
    """Issue 3: the claim read the version the submitter holds, so the state is current."""
    model, inbox, bus = _Model(), _CountingInbox(redis, 60), _Bus()
    store = _CountingStore(redis, 60)
    state = await _waiting_turn(redis)
    await _run_step(_loop(redis, model, inbox, bus, store), state.request_id, known=state)
    assert store.loads == 0
    assert model.requests[0].messages[-1] == {
        "role": "tool", "tool_call_id": "c1", "content": "noted"
    }  # fmt: skip
    assert [e.type for e in bus.sent][-1] == "complete"


async def test_a_step_reloads_a_state_written_since_its_submitter_read_it(redis: Redis) -> None:
    """A submitter's copy older than the stored version is not trusted: the step loads."""
    model, inbox, bus = _Model(), _CountingInbox(redis, 60), _Bus()
    store = _CountingStore(redis, 60)
    old = await _waiting_turn(redis)
    steered = old.model_copy(
        update={"messages": [*old.messages, {"role": "user", "content": "Only trains."}]}
    )
    await store.save(steered)  # another writer moved the turn on
    await _run_step(_loop(redis, model, inbox, bus, store), old.request_id, known=old)
    assert store.loads == 1
    sent = model.requests[0].messages
    assert any("Only trains." in str(m["content"]) for m in sent if m["role"] == "user")


async def test_a_redelivered_result_starts_the_step_a_crash_left_unrun(redis: Redis) -> None:
    """The results consumer has no de-duplication: recording is idempotent, and a result
    that is already recorded still submits the waiting turn (at-least-once delivery)."""
    store = TurnStore(redis, ttl_s=60)
    emitter = EventEmitter(_Bus(), redis, ttl_s=60)  # type: ignore[arg-type]
    reporter = ResultReporter(store, emitter)
    state = await _waiting_turn(redis)
    pending = state.pending[0]
    unrecorded = await store.save(state.model_copy(update={"results": {}}))
    result = ToolCallCompleted(
        tenant_id="t", session_id=state.session_id, request_id=state.request_id,
        data=ToolCallCompletedData(call_id=pending.call_id, tool_name="thinking",
                                   success=True, output="noted"),
    )  # fmt: skip
    first = await reporter.record(result)
    assert first is not None and first.version == unrecorded.version + 1
    again = await reporter.record(result)  # redelivery: nothing changes, the state is returned
    assert again is not None and again.version == first.version
    assert again.dispatched_results_in() and again.phase == "waiting"
    late = result.model_copy(
        update={"data": result.data.model_copy(update={"call_id": "not-this-round"})}
    )
    assert await reporter.record(late) is None


async def test_claiming_a_step_drops_the_tool_deadline_and_reads_the_turn(redis: Redis) -> None:
    """One round trip: lease, deadline dropped, version, stop flag and steer inbox."""
    namespace = f"t{secrets.token_hex(4)}."
    mine = TurnLeases(redis, owner="r1", namespace=namespace, ttl_s=6)
    other = TurnLeases(redis, owner="r2", namespace=namespace, ttl_s=6)
    state = await _waiting_turn(redis)
    rid = state.request_id
    await mine.set_deadline(rid, time.time() - 1)
    await SteerInbox(redis, 60).put(rid, "faster please")
    claim = await mine.claim_step(rid)
    assert claim is not None
    assert (claim.version, claim.stopped, claim.steered) == (state.version, False, True)
    assert await mine.due() == [], "the lease guards the turn now"
    assert await other.claim_step(rid) is None, "another replica holds the lease"
    await mine.release(rid)
    await redis.set(f"weft:turn:{rid}:cancel", 1, ex=60)
    taken = await other.claim_step(rid)
    assert taken is not None and taken.stopped


async def test_the_scheduler_hands_its_submitters_state_to_the_step(redis: Redis) -> None:
    """StepScheduler.submit: the claim and the submitter's state reach the step."""
    leases = TurnLeases(redis, owner="r1", namespace=f"t{secrets.token_hex(4)}.", ttl_s=6)
    started: list[StepStart] = []

    async def run_step(start: StepStart) -> None:
        started.append(start)

    scheduler = StepScheduler(leases, run_step, max_inflight=2, ttl_s=6)
    state = await _waiting_turn(redis)
    assert await scheduler.submit(state.request_id, state=state)
    for _ in range(100):
        if started:
            break
        await asyncio.sleep(0.01)
    assert started[0].known_state() == state
    stale = state.model_copy(update={"version": state.version - 1})
    assert StepStart(state.request_id, False, started[0].claim, stale).known_state() is None


class _CrashingModel(_Model):
    """A bug in the step: every call raises something that is not an LLM error."""

    async def stream(self, request: LLMRequest, sink: StreamSink) -> LLMResponse:
        self.requests.append(request)
        raise RuntimeError("a bug in the step")


async def test_a_step_that_keeps_crashing_ends_the_turn_with_one_complete(redis: Redis) -> None:
    """SPEC E-04: a crashed step is given up to the reapers and taken over; after
    MAX_TAKEOVERS the turn fails with its one complete instead of hanging without a lease
    or a deadline."""
    model, inbox, bus = _CrashingModel(), _CountingInbox(redis, 60), _Bus()
    loop = _loop(redis, model, inbox, bus)
    scheduler = StepScheduler(loop._leases, loop.run_step, max_inflight=4, ttl_s=6)
    state = await _waiting_turn(redis)
    scheduler.start()
    try:
        assert await scheduler.submit(state.request_id, state=state)
        for _ in range(300):
            if any(e.type == "complete" for e in bus.sent):
                break
            await asyncio.sleep(0.05)
    finally:
        await scheduler.stop(0)
    completes = [e.model_dump() for e in bus.sent if e.type == "complete"]
    errors = [e.model_dump() for e in bus.sent if e.type == "error"]
    assert [c["data"]["status"] for c in completes] == ["failed"]
    assert errors[-1]["data"]["code"] == "engine_error"
    assert len(model.requests) == 1 + MAX_TAKEOVERS


async def test_a_superseded_step_leaves_the_turn_to_the_replica_that_advanced_it(
    redis: Redis,
) -> None:
    """A step whose write lost to another replica releases its lease and is not retried."""
    leases = TurnLeases(redis, owner="r1", namespace=f"t{secrets.token_hex(4)}.", ttl_s=6)

    async def superseded(start: StepStart) -> None:
        raise StaleTurnState(start.request_id)

    scheduler = StepScheduler(leases, superseded, max_inflight=2, ttl_s=6)
    state = await _waiting_turn(redis)
    assert await scheduler.submit(state.request_id)
    for _ in range(100):
        if not scheduler.running(state.request_id):
            break
        await asyncio.sleep(0.01)
    assert await leases.expired() == []
    assert await redis.get(f"weft:turn:{state.request_id}:lease") is None
