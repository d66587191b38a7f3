"""The TurnAuditor's decisions without infrastructure (ARCHITECTURE invariant 2): the real
store, emitter and finisher on an in-memory Redis (fakeredis, with its Lua), memory's list
of unfinished turns and Kafka's trails as fixed answers, and a bus that keeps what it is
given. Which turns are left alone, which are ended and how, and what readiness says."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, cast

import pytest
from fakeredis import FakeAsyncRedis
from weft_contracts import (
    AgentConfig,
    CompleteEvent,
    Envelope,
    ErrorData,
    ErrorEvent,
    Topic,
    TurnStatus,
)
from weft_engine.auditor import TURN_STATE_LOST, AuditSettings, TurnAuditor, UnfinishedTurn
from weft_engine.emitter import EventEmitter
from weft_engine.finalize import Finisher
from weft_engine.keys import completed_key, seq_key
from weft_engine.leases import TurnLeases
from weft_engine.sessions import SessionGate
from weft_engine.state import TurnState, TurnStateLost, TurnStore
from weft_engine.trails import TurnRef, TurnTrail, partition_of
from weft_platform.bus import EventBus
from weft_platform.health import Degraded

SENTINEL = "weft:test:engine:sentinel"
CHANNEL = "weft:test:cancel"


@dataclass
class _Bus:
    """The bus's publishing side: keeps every message, acks at once."""

    sent: list[Envelope] = field(default_factory=list)

    async def publish(self, topic: Topic, message: Envelope) -> None:
        self.sent.append(message)

    async def publish_nowait(self, topic: Topic, message: Envelope) -> asyncio.Future[Any]:
        self.sent.append(message)
        done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done


@dataclass
class _Memory:
    """memory's unfinished turns, one page of ``size`` at a time."""

    turns: list[UnfinishedTurn]
    size: int = 100
    asked: int = 0

    async def page(self, started_after: datetime, limit: int) -> tuple[list[UnfinishedTurn], bool]:
        self.asked += 1
        later = [t for t in self.turns if t.started_at > started_after]
        return later[: min(limit, self.size)], len(later) > min(limit, self.size)


@dataclass
class _Kafka:
    """What Kafka holds of each turn."""

    trails: dict[str, TurnTrail]
    reads: list[list[str]] = field(default_factory=list)

    async def read(self, turns: Sequence[TurnRef]) -> dict[str, TurnTrail]:
        self.reads.append([t.request_id for t in turns])
        return {t.request_id: self.trails.get(t.request_id, TurnTrail()) for t in turns}


@dataclass
class _Replica:
    redis: FakeAsyncRedis
    bus: _Bus
    auditor: TurnAuditor
    store: TurnStore


def _replica(
    redis: FakeAsyncRedis, memory: _Memory, kafka: _Kafka, name: str = "engine-1"
) -> _Replica:
    bus = _Bus()
    store = TurnStore(redis, 600)
    emitter = EventEmitter(cast(EventBus, bus), redis, ttl_s=600)
    finisher = Finisher(
        emitter=emitter, store=store, sessions=SessionGate(redis, 600),
        leases=TurnLeases(redis, owner=name, namespace="t.", ttl_s=3),
    )  # fmt: skip
    auditor = TurnAuditor(
        redis=redis, finisher=finisher, turns=memory, trails=kafka,
        settings=AuditSettings(grace_s=3.0), sentinel_key=SENTINEL, cancel_channel=CHANNEL,
        owner=name, state_ttl_s=600,
    )  # fmt: skip
    return _Replica(redis, bus, auditor, store)


def _turn(rid: str, age_s: float = 30.0) -> UnfinishedTurn:
    started = datetime.fromtimestamp(time.time() - age_s, UTC)
    return UnfinishedTurn(tenant_id="t1", session_id=f"s-{rid}", request_id=rid,
                          started_at=started)  # fmt: skip


async def _store_state(store: TurnStore, turn: UnfinishedTurn) -> None:
    state = TurnState(
        tenant_id=turn.tenant_id, session_id=turn.session_id, request_id=turn.request_id,
        user_id="u", agent=AgentConfig(agent_id="a", model="m"), messages=[],
        phase="waiting", started_at=turn.started_at.timestamp(),
    )  # fmt: skip
    await store.save_reserving(state, 1)


@pytest.fixture
def redis() -> FakeAsyncRedis:
    return FakeAsyncRedis()


async def test_a_turn_with_its_state_is_never_touched_however_old(redis: FakeAsyncRedis) -> None:
    waiting = _turn("r-waiting", age_s=3 * 3600)  # a long tool wait, an approval
    replica = _replica(redis, _Memory([waiting]), _Kafka({}))
    await _store_state(replica.store, waiting)
    report = await replica.auditor.sweep()
    assert report.unfinished == 1 and report.lost == [] and replica.bus.sent == []
    assert await replica.store.load("r-waiting") is not None


async def test_a_completed_turn_that_memory_has_not_stored_yet_is_left_alone(
    redis: FakeAsyncRedis,
) -> None:
    turn = _turn("r-done")
    await redis.set(completed_key("r-done"), 1)
    replica = _replica(redis, _Memory([turn]), _Kafka({}))
    report = await replica.auditor.sweep()
    assert report.lost == [] and replica.bus.sent == []


async def test_a_turn_younger_than_the_grace_is_not_audited_yet(redis: FakeAsyncRedis) -> None:
    replica = _replica(redis, _Memory([_turn("r-young", age_s=0.5)]), _Kafka({}))
    report = await replica.auditor.sweep()
    assert report.lost == [] and replica.bus.sent == []


async def test_a_lost_turn_whose_complete_is_in_kafka_is_not_ended_again(
    redis: FakeAsyncRedis,
) -> None:  # memory lags behind Kafka: the turn did end
    kafka = _Kafka({"r-lag": TurnTrail(last_seq=9, completed=True)})
    replica = _replica(redis, _Memory([_turn("r-lag")]), kafka)
    report = await replica.auditor.sweep()
    assert report.lost == ["r-lag"] and report.lagging == ["r-lag"] and report.ended == []
    assert replica.bus.sent == []
    assert not await redis.exists(completed_key("r-lag"))


async def test_a_lost_turn_ends_with_one_error_and_one_complete_after_kafkas_last_seq(
    redis: FakeAsyncRedis,
) -> None:
    kafka = _Kafka({"r-lost": TurnTrail(last_seq=41, completed=False)})
    replica = _replica(redis, _Memory([_turn("r-lost")]), kafka)
    pubsub = redis.pubsub()
    await pubsub.subscribe(CHANNEL)
    report = await replica.auditor.sweep()
    assert report.ended == ["r-lost"]
    error, complete = replica.bus.sent
    assert isinstance(error, ErrorEvent) and isinstance(complete, CompleteEvent)
    assert (error.seq, complete.seq) == (42, 43)
    assert error.data.code == "turn_state_lost" and error.data.retryable
    assert error.data.message == TURN_STATE_LOST
    assert complete.data.status == TurnStatus.FAILED
    # A step still running the turn somewhere is told to stop.
    messages = [await pubsub.get_message(timeout=0.2) for _ in range(3)]
    assert [m["data"] for m in messages if m and m["type"] == "message"] == [b"r-lost"]
    await pubsub.aclose()  # type: ignore[no-untyped-call]
    again = await replica.auditor.sweep()  # memory has not stored the complete yet
    assert again.lost == [] and len(replica.bus.sent) == 2


async def test_two_replicas_end_a_lost_turn_once(redis: FakeAsyncRedis) -> None:
    memory, kafka = _Memory([_turn("r-once")]), _Kafka({"r-once": TurnTrail(last_seq=3)})
    first, second = _replica(redis, memory, kafka, "e1"), _replica(redis, memory, kafka, "e2")
    reports = await asyncio.gather(first.auditor.sweep(), second.auditor.sweep())
    assert sorted(len(r.ended) for r in reports) == [0, 1]
    sent = first.bus.sent + second.bus.sent
    assert [type(e) for e in sent] == [ErrorEvent, CompleteEvent]


async def test_every_page_of_unfinished_turns_is_audited(redis: FakeAsyncRedis) -> None:
    turns = [_turn(f"r-{i}", age_s=60 - i) for i in range(5)]
    memory = _Memory(turns, size=2)
    replica = _replica(redis, memory, _Kafka({t.request_id: TurnTrail(last_seq=2) for t in turns}))
    report = await replica.auditor.sweep()
    assert memory.asked == 3 and report.unfinished == 5
    assert sorted(report.ended) == sorted(t.request_id for t in turns)


async def test_a_turn_without_an_event_in_this_deployments_topic_is_left_alone(
    redis: FakeAsyncRedis,
) -> None:  # another deployment's turn on a shared database (its stack, its Redis)
    replica = _replica(redis, _Memory([_turn("r-other")]), _Kafka({}))
    report = await replica.auditor.sweep()
    assert report.foreign == ["r-other"] and report.ended == [] and replica.bus.sent == []
    again = await replica.auditor.sweep()  # set aside: its trail is not read every sweep
    assert again.lost == [] and replica.bus.sent == []


async def test_readiness_is_degraded_from_an_emptied_redis_until_a_sweep_ran(
    redis: FakeAsyncRedis,
) -> None:
    replica = _replica(redis, _Memory([]), _Kafka({}))
    with pytest.raises(Degraded):  # nothing audited yet
        await replica.auditor.ready()
    await replica.auditor.sweep()
    assert await replica.auditor.ready()
    await redis.flushdb()
    with pytest.raises(Degraded, match="redis lost its data"):
        await replica.auditor.ready()
    await replica.auditor.sweep()
    assert await replica.auditor.ready()


async def test_a_replica_that_sees_the_sentinel_rewritten_audits_before_it_is_ready(
    redis: FakeAsyncRedis,
) -> None:
    memory, kafka = _Memory([]), _Kafka({})
    first, second = _replica(redis, memory, kafka, "e1"), _replica(redis, memory, kafka, "e2")
    await first.auditor.sweep()
    await second.auditor.sweep()
    await redis.flushdb()
    await first.auditor.sweep()  # rewrites the sentinel with a new value
    with pytest.raises(Degraded):
        await second.auditor.ready()
    await second.auditor.sweep()
    assert await second.auditor.ready()


async def test_a_step_that_outlived_the_loss_cannot_count_seqs_from_one_again(
    redis: FakeAsyncRedis,
) -> None:
    bus = _Bus()
    emitter = EventEmitter(cast(EventBus, bus), redis, ttl_s=600)
    ids = {"tenant_id": "t1", "session_id": "s1", "request_id": "r1", "traceparent": None}
    await redis.set(seq_key("r1"), 7)
    await emitter.emit(ErrorEvent, ids, _error())
    await redis.flushdb()
    with pytest.raises(TurnStateLost):
        await emitter.emit(ErrorEvent, ids, _error())
    assert [e.seq for e in bus.sent] == [8]
    assert not await redis.exists(seq_key("r1"))


def _error() -> ErrorData:
    return ErrorData(code="x", message="x")


def test_a_sessions_partition_is_the_producers() -> None:
    # aiokafka's default partitioner is murmur2 of the key, like Kafka's Java client:
    # the same session always lands on one partition, and keys spread over all of them.
    partitions = list(range(6))
    assert partition_of("session-1", partitions) == partition_of("session-1", partitions)
    spread = {partition_of(f"session-{i}", partitions) for i in range(60)}
    assert spread == set(partitions)


async def test_a_replica_starting_on_a_vouched_redis_is_ready_at_once(
    redis: FakeAsyncRedis,
) -> None:  # a rolling restart does not wait for memory
    memory, kafka = _Memory([]), _Kafka({})
    await _replica(redis, memory, kafka, "e1").auditor.sweep()
    fresh = _replica(redis, memory, kafka, "e2")
    assert await fresh.auditor.ready()
    await fresh.auditor.sweep()
    await redis.flushdb()
    with pytest.raises(Degraded):
        await fresh.auditor.ready()


@dataclass
class _RestoringKafka(_Kafka):
    """Reading Kafka takes a while; meanwhile a decision puts the waiting turn back from
    memory's copy (SPEC H-02)."""

    store: TurnStore | None = None
    restore: UnfinishedTurn | None = None

    async def read(self, turns: Sequence[TurnRef]) -> dict[str, TurnTrail]:
        assert self.store is not None and self.restore is not None
        await _store_state(self.store, self.restore)
        return await super().read(turns)


async def test_a_turn_put_back_while_kafka_is_read_is_not_ended(redis: FakeAsyncRedis) -> None:
    """The issue-35 full fault run: the sweep saw the turn without state, a decision put it
    back from memory while the sweep read Kafka, and the sweep then ended it with
    ``turn_state_lost``. Looked at again after the read, it is left alone."""
    turn = _turn("r-back")
    kafka = _RestoringKafka({"r-back": TurnTrail(last_seq=10)})
    replica = _replica(redis, _Memory([turn]), kafka)
    kafka.store, kafka.restore = replica.store, turn
    report = await replica.auditor.sweep()
    assert report.ended == [] and report.restored == ["r-back"], report
    assert replica.bus.sent == []
    assert await replica.store.load("r-back") is not None


async def test_a_turn_put_back_while_memory_is_asked_is_not_ended(redis: FakeAsyncRedis) -> None:
    """The chaos run of issue 38: the sweep found no state after its Kafka read and asked
    memory for the suspended copy; meanwhile the turn's decision had put it back and
    memory no longer kept a copy, so the restore found nothing and the sweep ended a live
    turn with ``turn_state_lost``. Looked at once more before it ends, it is left alone."""
    turn = _turn("r-decided")
    replica = _replica(redis, _Memory([turn]), _Kafka({"r-decided": TurnTrail(last_seq=7)}))

    async def decided_meanwhile(request_id: str, credential: str | None) -> TurnState | None:
        await _store_state(replica.store, turn)  # the decision path put it back
        return None  # memory's copy went with the decision

    replica.auditor._restore = decided_meanwhile
    report = await replica.auditor.sweep()
    assert report.ended == [] and report.restored == ["r-decided"], report
    assert replica.bus.sent == []
    assert await replica.store.load("r-decided") is not None
