"""One step of a turn on the real Redis and Kafka, the model being the scripted LLM test
double over HTTP: a steer message that waits when the tools' results come back joins the
next LLM call; when none waits, the step does not poll the inbox before thinking (SPEC
E-13). A step starts from the state its submitter holds when nobody wrote the
turn since, and reloads it otherwise; a redelivered tool result still starts the step a
crash left unrun; a step that keeps crashing ends its turn with one ``complete``; a turn
past its wall-clock bound ends at its next step (SPEC E-20)."""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka.admin import AIOKafkaAdminClient
from redis.asyncio import Redis
from weft_contracts import (
    AgentConfig,
    CancelRequested,
    CancelRequestedData,
    ToolCallCompleted,
    ToolCallCompletedData,
    Topic,
)
from weft_engine.context import ContextManager
from weft_engine.emitter import EventEmitter
from weft_engine.finalize import Finisher
from weft_engine.history_client import HistoryClient
from weft_engine.leases import StepClaim, TurnLeases
from weft_engine.loop import DEADLINE_REASON, MAX_TAKEOVERS, TurnLoop
from weft_engine.reporting import ResultReporter
from weft_engine.scheduler import StepScheduler, StepStart
from weft_engine.sessions import SessionGate, SteerInbox
from weft_engine.state import PendingCall, StaleTurnState, TurnState, TurnStore
from weft_engine.think import ThinkSettings
from weft_engine.token_cache import CachedTokenEstimator
from weft_llm import OpenAIChatModel
from weft_platform.runtime import ServiceRuntime
from weft_testkit import chat_requests

from tests.integration.kafka_helpers import read_topic, service_runtime


@pytest.fixture
async def runtime(infra: dict[str, str]) -> AsyncIterator[ServiceRuntime]:
    """The engine's bus on the real Kafka (topics of its own)."""
    async with service_runtime(infra, "engine-step", start=True) as rt:
        yield rt


@pytest.fixture
async def llm(scripted_llm: str) -> AsyncIterator[httpx.AsyncClient]:
    """The test double's control API, scripted to answer every call with text."""
    async with httpx.AsyncClient(base_url=scripted_llm) as client:
        response = await client.post("/_script", json={"fallback": "rounds", "rounds": 0})
        response.raise_for_status()
        yield client


@pytest.fixture
async def model(scripted_llm: str) -> AsyncIterator[OpenAIChatModel]:
    """The engine's model client (the ``openai`` package) on the test double."""
    client = OpenAIChatModel(base_url=f"{scripted_llm}/v1", api_key="scripted-llm-test-double")
    yield client
    await client.aclose()


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


class _CrashingContext(ContextManager):
    """A bug in the step: fitting the context raises something that is not an LLM error."""

    fits = 0

    async def fit(self, state: TurnState, *, force_reason: str | None = None) -> TurnState:
        self.fits += 1
        raise RuntimeError("a bug in the step")


def _loop(
    redis: Redis,
    runtime: ServiceRuntime,
    model: OpenAIChatModel,
    inbox: SteerInbox,
    store: TurnStore | None = None,
    context_type: type[ContextManager] = ContextManager,
) -> TurnLoop:
    store = store or TurnStore(redis, ttl_s=60)
    emitter = EventEmitter(runtime.bus, redis, ttl_s=60)
    leases = TurnLeases(redis, owner="r1", namespace=f"t{secrets.token_hex(4)}.", ttl_s=6)
    context = context_type(
        memory=HistoryClient(base_url="http://127.0.0.1:9"), model=model, emitter=emitter,
        estimator=CachedTokenEstimator(),
    )  # fmt: skip
    finisher = Finisher(
        emitter=emitter, store=store, leases=leases, sessions=SessionGate(redis, 60)
    )
    return TurnLoop(
        bus=runtime.bus, redis=redis, store=store, emitter=emitter, model=model,
        finisher=finisher, reporter=ResultReporter(store, emitter), inbox=inbox,
        leases=leases, context=context, think_settings=ThinkSettings(), tool_timeout_s=60,
    )  # fmt: skip


async def _events(
    runtime: ServiceRuntime, request_id: str, until: str = "complete"
) -> list[dict[str, Any]]:
    """The turn's agent events as Kafka has them, up to its first ``until`` event."""

    def completed(events: list[dict[str, Any]]) -> bool:
        return any(e["type"] == until and e["request_id"] == request_id for e in events)

    events = await read_topic(runtime, Topic.AGENT_EVENTS, completed)
    return [e for e in events if e["request_id"] == request_id]


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


async def test_a_steer_waiting_when_results_arrive_joins_the_next_llm_call(
    redis: Redis, runtime: ServiceRuntime, model: OpenAIChatModel, llm: httpx.AsyncClient
) -> None:
    """SPEC E-13: the steer sent while the tools ran is the last message the model reads."""
    inbox = _CountingInbox(redis, 60)
    state = await _waiting_turn(redis)
    await inbox.put(state.request_id, "Also check the train prices.")
    await _run_step(_loop(redis, runtime, model, inbox), state.request_id)
    [request] = await chat_requests(llm)
    sent = request["messages"]
    assert [m["role"] for m in sent[-3:]] == ["assistant", "tool", "user"]
    assert sent[-1]["content"] == "Also check the train prices."
    assert inbox.polls == 1
    assert [e["type"] for e in await _events(runtime, state.request_id)][-1] == "complete"


async def test_without_a_waiting_steer_the_step_thinks_without_polling(
    redis: Redis, runtime: ServiceRuntime, model: OpenAIChatModel, llm: httpx.AsyncClient
) -> None:
    """The step's claim already saw no stop flag and an empty inbox."""
    inbox = _CountingInbox(redis, 60)
    state = await _waiting_turn(redis)
    await _run_step(_loop(redis, runtime, model, inbox), state.request_id)
    assert inbox.polls == 0
    [request] = await chat_requests(llm)
    assert request["messages"][-1]["role"] == "tool"
    assert [e["type"] for e in await _events(runtime, state.request_id)][-1] == "complete"


async def test_a_step_starts_from_the_submitters_state_without_loading_it(
    redis: Redis, runtime: ServiceRuntime, model: OpenAIChatModel, llm: httpx.AsyncClient
) -> None:
    """The claim read the version the submitter holds, so the state is current."""
    store = _CountingStore(redis, 60)
    state = await _waiting_turn(redis)
    loop = _loop(redis, runtime, model, _CountingInbox(redis, 60), store)
    await _run_step(loop, state.request_id, known=state)
    assert store.loads == 0
    [request] = await chat_requests(llm)
    assert request["messages"][-1] == {"role": "tool", "tool_call_id": "c1", "content": "noted"}
    assert [e["type"] for e in await _events(runtime, state.request_id)][-1] == "complete"


async def test_a_step_reloads_a_state_written_since_its_submitter_read_it(
    redis: Redis, runtime: ServiceRuntime, model: OpenAIChatModel, llm: httpx.AsyncClient
) -> None:
    """A submitter's copy older than the stored version is not trusted: the step loads."""
    store = _CountingStore(redis, 60)
    old = await _waiting_turn(redis)
    steered = old.model_copy(
        update={"messages": [*old.messages, {"role": "user", "content": "Only trains."}]}
    )
    await store.save(steered)  # another writer moved the turn on
    loop = _loop(redis, runtime, model, _CountingInbox(redis, 60), store)
    await _run_step(loop, old.request_id, known=old)
    assert store.loads == 1
    [request] = await chat_requests(llm)
    sent = request["messages"]
    assert any("Only trains." in str(m["content"]) for m in sent if m["role"] == "user")


async def test_a_redelivered_result_starts_the_step_a_crash_left_unrun(
    redis: Redis, runtime: ServiceRuntime
) -> None:
    """The results consumer has no de-duplication: recording is idempotent, and a result
    that is already recorded still submits the waiting turn (at-least-once delivery)."""
    store = TurnStore(redis, ttl_s=60)
    emitter = EventEmitter(runtime.bus, redis, ttl_s=60)
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
    assert first is not None and first.state.version == unrecorded.version + 1
    again = await reporter.record(result)  # redelivery: nothing changes, the state is returned
    assert again is not None and again.state.version == first.state.version
    assert again.state.tools_answered() and again.claim is None
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


async def test_recording_the_last_result_claims_the_step_in_the_same_write(
    redis: Redis, runtime: ServiceRuntime
) -> None:
    """The write that records a round's last result also reserves the
    ``tool_result`` event's seq and takes the step's lease (deadline dropped, stop flag and
    steer inbox read); another replica's lease is left alone, the result still recorded."""
    namespace = f"t{secrets.token_hex(4)}."
    mine = TurnLeases(redis, owner="r1", namespace=namespace, ttl_s=6)
    other = TurnLeases(redis, owner="r2", namespace=namespace, ttl_s=6)
    store = TurnStore(redis, ttl_s=60)
    emitter = EventEmitter(runtime.bus, redis, ttl_s=60)
    reporter = ResultReporter(store, emitter)
    state = await _waiting_turn(redis)
    rid, pending = state.request_id, state.pending[0]
    await store.save(state.model_copy(update={"results": {}}))
    await mine.set_deadline(rid, time.time() + 60)
    await SteerInbox(redis, 60).put(rid, "faster please")
    result = ToolCallCompleted(
        tenant_id="t", session_id=state.session_id, request_id=rid,
        data=ToolCallCompletedData(call_id=pending.call_id, tool_name="thinking",
                                   success=True, output="noted"),
    )  # fmt: skip
    recorded = await reporter.record(result, mine.lease_request(rid))
    assert recorded is not None and recorded.state.tools_answered()
    assert recorded.claim is not None
    await emitter.flush(rid)  # the tool_result event was queued with its reserved seq
    claim = recorded.claim
    assert (claim.version, claim.stopped, claim.steered) == (recorded.state.version, False, True)
    assert await other.claim_step(rid) is None, "this replica holds the lease"
    await mine.set_deadline(rid, time.time() - 1)
    await mine.release(rid)
    assert await mine.due() == [rid]
    [event] = await _events(runtime, rid, until="tool_result")
    seq = await redis.get(f"weft:turn:{rid}:seq")
    assert seq is not None and event["seq"] == int(seq)

    # Another replica holds the lease: the result is recorded, the lease left alone.
    await store.save(recorded.state.model_copy(update={"results": {}}))
    assert await other.claim_step(rid) is not None
    await other.set_deadline(rid, time.time() - 1)
    again = await reporter.record(result, mine.lease_request(rid))
    assert again is not None and again.claim is None and again.state.tools_answered()
    assert await mine.claim_step(rid) is None
    assert await mine.due() == [rid], "the deadline stays for the lease holder to drop"


async def test_the_scheduler_hands_its_submitters_state_to_the_step(redis: Redis) -> None:
    """StepScheduler.submit: the claim and the submitter's state reach the step."""
    leases = TurnLeases(redis, owner="r1", namespace=f"t{secrets.token_hex(4)}.", ttl_s=6)
    started: asyncio.Queue[StepStart] = asyncio.Queue()

    async def run_step(start: StepStart) -> None:
        started.put_nowait(start)

    scheduler = StepScheduler(leases, run_step, max_inflight=2, ttl_s=6)
    state = await _waiting_turn(redis)
    assert await scheduler.submit(state.request_id, state=state)
    start = await asyncio.wait_for(started.get(), 5)
    assert start.known_state() == state
    stale = state.model_copy(update={"version": state.version - 1})
    assert StepStart(state.request_id, False, start.claim, stale).known_state() is None


def _blocking_scheduler(
    redis: Redis, *, max_inflight: int
) -> tuple[StepScheduler, asyncio.Queue[StepStart], asyncio.Event]:
    """A scheduler whose steps report their start, then wait for the event."""
    leases = TurnLeases(redis, owner="r1", namespace=f"t{secrets.token_hex(4)}.", ttl_s=6)
    started: asyncio.Queue[StepStart] = asyncio.Queue()
    release = asyncio.Event()

    async def run_step(start: StepStart) -> None:
        started.put_nowait(start)
        await release.wait()

    return StepScheduler(leases, run_step, max_inflight=max_inflight, ttl_s=6), started, release


async def test_a_reserved_slot_runs_the_step_its_caller_claimed(redis: Redis) -> None:
    """StepScheduler.reserve / start_claimed: the slot is taken without waiting (none when
    all are busy), the step runs under the caller's claim and gives the slot back; a turn
    submitted while its step runs here runs again after it."""
    scheduler, started, release = _blocking_scheduler(redis, max_inflight=1)
    state = await _waiting_turn(redis)
    rid = state.request_id
    lease = await scheduler.reserve(rid)
    assert lease is not None and lease.args[0] == "r1"
    assert await scheduler.reserve("req_other") is None, "the only slot is taken"
    claim = StepClaim(version=state.version, stopped=False, steered=False)
    assert scheduler.start_claimed(rid, claim, state)
    start = await asyncio.wait_for(started.get(), 5)
    assert start.claim == claim and start.known_state() == state
    assert await scheduler.reserve(rid) is None, "the turn's step runs here"
    # A result recorded while the step that dispatched its call still finishes: the turn
    # is submitted again once that step has ended, not left to its tool deadline.
    assert not await scheduler.submit(rid, state=state)
    release.set()
    again = await asyncio.wait_for(started.get(), 5)
    assert again.request_id == rid and again.known_state() == state
    await scheduler.stop(grace_s=5)
    assert await scheduler.reserve("req_other") is not None, "the step gave its slot back"


async def test_a_takeover_submitted_while_the_step_still_runs_here_stays_a_takeover(
    redis: Redis,
) -> None:
    """SPEC E-04: a crashed step gives its lease up before it leaves the scheduler, so the
    reaper's takeover can arrive while it is still here; the submission made once it left
    must still count as a takeover, or a crashing turn would never reach MAX_TAKEOVERS."""
    scheduler, started, release = _blocking_scheduler(redis, max_inflight=2)
    rid = (await _waiting_turn(redis)).request_id
    assert await scheduler.submit(rid)
    assert not (await asyncio.wait_for(started.get(), 5)).takeover
    assert not await scheduler.submit(rid, takeover=True), "its step still runs here"
    assert not await scheduler.submit(rid), "a plain submission does not undo the takeover"
    release.set()
    again = await asyncio.wait_for(started.get(), 5)
    assert again.request_id == rid and again.takeover
    await scheduler.stop(grace_s=5)


async def test_a_step_that_keeps_crashing_ends_the_turn_with_one_complete(
    redis: Redis, runtime: ServiceRuntime, model: OpenAIChatModel, llm: httpx.AsyncClient
) -> None:
    """SPEC E-04: a crashed step is given up to the reapers and taken over; after
    MAX_TAKEOVERS the turn fails with its one complete instead of hanging without a lease
    or a deadline."""
    loop = _loop(redis, runtime, model, _CountingInbox(redis, 60), context_type=_CrashingContext)
    scheduler = StepScheduler(loop._leases, loop.run_step, max_inflight=4, ttl_s=6)
    state = await _waiting_turn(redis)
    scheduler.start()
    try:
        assert await scheduler.submit(state.request_id, state=state)
        events = await _events(runtime, state.request_id)
    finally:
        await scheduler.stop(0)
    completes = [e for e in events if e["type"] == "complete"]
    errors = [e for e in events if e["type"] == "error"]
    assert [c["data"]["status"] for c in completes] == ["failed"]
    assert errors[-1]["data"]["code"] == "engine_error"
    assert loop._context.fits == 1 + MAX_TAKEOVERS  # type: ignore[attr-defined]
    assert await chat_requests(llm) == []  # the step crashed before calling the model


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
    await scheduler.stop(grace_s=5)  # waits for the step, and its release, to finish
    assert await leases.expired() == []
    assert await redis.get(f"weft:turn:{state.request_id}:lease") is None


async def test_a_full_replica_leaves_further_requests_in_kafka(
    redis: Redis, infra: dict[str, str]
) -> None:  # invariant 6: bounded in-flight turns per replica
    """With every step slot busy, ``submit`` holds the consumer's handler: the next record
    is not taken, not acknowledged, and runs once a slot frees."""
    leases = TurnLeases(redis, owner="r1", namespace=f"t{secrets.token_hex(4)}.", ttl_s=6)
    started: list[str] = []
    release, all_started, second_taken = asyncio.Event(), asyncio.Event(), asyncio.Event()

    async def run_step(start: StepStart) -> None:
        started.append(start.request_id)
        if len(started) == 3:
            all_started.set()
        await release.wait()

    scheduler = StepScheduler(leases, run_step, max_inflight=1, ttl_s=6)
    turns = [(await _waiting_turn(redis)).request_id for _ in range(3)]
    taken: list[str] = []

    async def on_control(message: Any) -> None:
        taken.append(message.request_id)
        if len(taken) == 2:
            second_taken.set()  # it now waits in submit for the only slot
        await scheduler.submit(message.request_id)

    async with service_runtime(infra, "engine-inflight", commit_interval_ms=50) as rt:
        rt.bus.consume(Topic.AGENT_CONTROL, "engine", on_control)
        await rt.broker.start()
        for rid in turns:  # one session: one partition, in this order
            await rt.bus.publish(Topic.AGENT_CONTROL, CancelRequested(
                tenant_id="t", session_id="s", request_id=rid, data=CancelRequestedData(),
            ))  # fmt: skip
        await asyncio.wait_for(second_taken.wait(), 30)
        [subscriber] = rt.broker.subscribers
        # FastStream types subscribers generically; a Kafka one holds its aiokafka consumer.
        consumer: AIOKafkaConsumer = subscriber.consumer  # type: ignore[attr-defined]
        # The third record is in Kafka (another group reads it), and the first commit (an
        # interval, then round trips to the broker) gives a consumer that let it through
        # the time to fetch it and hand it over.
        await read_topic(rt, Topic.AGENT_CONTROL, lambda found: len(found) >= len(turns))
        committed = await _committed(rt, "engine", at_least=1)
        assert taken == turns[:2] and started == turns[:1]
        assert committed == 1, "only the first record is acknowledged"
        positions = [await consumer.position(tp) for tp in consumer.assignment()]
        assert sum(positions) == 2, "the consumer stands at the third record"

        release.set()
        await asyncio.wait_for(all_started.wait(), 30)
        assert taken == turns and started == turns
    await scheduler.stop(grace_s=5)


async def _committed(rt: ServiceRuntime, group: str, *, at_least: int = 0) -> int:
    """The offsets a consumer group committed, summed over the partitions, once they are
    ``at_least`` that many (commits are flushed on an interval; fails after 30 s)."""
    admin = AIOKafkaAdminClient(**rt.settings.client_options())
    await admin.start()
    try:
        for _ in range(300):
            offsets = await admin.list_consumer_group_offsets(rt.settings.topic_prefix + group)
            committed: int = sum(max(meta.offset, 0) for meta in offsets.values())
            if committed >= at_least:
                return committed
            await asyncio.sleep(0.1)
    finally:
        await admin.close()
    raise AssertionError(f"{group} committed {committed} records in 30 s, not {at_least}")


async def test_a_turn_past_its_deadline_with_results_is_rescued_not_thought_on(
    redis: Redis, runtime: ServiceRuntime, model: OpenAIChatModel, llm: httpx.AsyncClient
) -> None:
    """SPEC E-20: woken past its wall-clock bound, a turn whose tools answered gets one
    closing call without tools; its answer completes the turn on Kafka."""
    store = TurnStore(redis, ttl_s=60)
    waiting = await _waiting_turn(redis)
    state = await store.save(waiting.model_copy(update={"deadline_at": time.time() - 1}))
    await _run_step(_loop(redis, runtime, model, SteerInbox(redis, 60)), state.request_id)
    [request] = await chat_requests(llm)
    assert request["tool_choice"] == "none"
    assert DEADLINE_REASON in str(request["messages"][-1]["content"])
    events = await _events(runtime, state.request_id)
    assert [e["type"] for e in events][-2:] == ["final_answer", "complete"]
    assert events[-1]["data"]["status"] == "completed"
    assert await store.load(state.request_id) is None


async def test_a_turn_past_its_deadline_without_results_fails_with_its_code(
    redis: Redis, runtime: ServiceRuntime, model: OpenAIChatModel, llm: httpx.AsyncClient
) -> None:
    """SPEC E-20: nothing gathered, so no model call: ``error`` with the stable code, then
    ``complete`` failed."""
    store = TurnStore(redis, ttl_s=60)
    waiting = await _waiting_turn(redis)
    fresh = {"phase": "think", "pending": [], "groups": [], "dispatched_groups": 0, "results": {}}
    state = await store.save(waiting.model_copy(update={**fresh, "deadline_at": time.time() - 1}))
    await _run_step(_loop(redis, runtime, model, SteerInbox(redis, 60)), state.request_id)
    events = await _events(runtime, state.request_id)
    assert [e["type"] for e in events] == ["error", "complete"]
    assert events[0]["data"]["code"] == "turn_deadline_exceeded"
    assert events[1]["data"]["status"] == "failed"
    assert await chat_requests(llm) == []
