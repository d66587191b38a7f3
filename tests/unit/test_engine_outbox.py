"""The turn's outbox (``weft_engine.outbox``) without infrastructure: fakeredis with its
Lua, a bus that keeps what it is given (invariant 1, SPEC E-18).

- A result's write stores its events at the seqs it reserved, held by its emitter; the
  ack takes them out and lets go.
- While another emitter holds the turn, no seq is reserved past its events: the write is
  refused (nothing written) and so is an emitter's own reservation.
- Entries left without a holder (their replica died) are published first, at their seqs
  and in seq order, by whoever reserves the next seq; a live holder is waited for.
- A catch-up never gives back a seq that waits in the outbox, and holds the turn while
  it reads the trail: a result recorded meanwhile waits, so no seq is handed out twice.
- A failed publish lets go at once, so the next reservation publishes the entries.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any, cast

import pytest
from fakeredis import FakeAsyncRedis
from weft_contracts import (
    AgentConfig,
    Envelope,
    ThoughtData,
    ThoughtEvent,
    ToolResultData,
    ToolResultEvent,
    Topic,
)
from weft_engine.emitter import EventEmitter
from weft_engine.keys import outbox_holder_key, outbox_key, seq_key
from weft_engine.outbox import SeqsHeld, entries_by_seq
from weft_engine.state import TurnState, TurnStore
from weft_platform.bus import EventBus

RID = "req_outbox"


@dataclass
class _Bus:
    """Keeps what it is given; acks at once, or fails every publish when ``broken``."""

    sent: list[Envelope] = field(default_factory=list)
    broken: bool = False

    async def publish(self, topic: Topic, message: Envelope) -> None:
        self.sent.append(message)

    async def publish_nowait(self, topic: Topic, message: Envelope) -> asyncio.Future[Any]:
        self.sent.append(message)
        done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        if self.broken:
            done.set_exception(ConnectionError("broker gone"))
        else:
            done.set_result(None)
        return done


@dataclass
class _Replica:
    bus: _Bus
    emitter: EventEmitter


@pytest.fixture
def redis() -> FakeAsyncRedis:
    return FakeAsyncRedis()


def _replica(redis: FakeAsyncRedis) -> _Replica:
    bus = _Bus()
    return _Replica(bus, EventEmitter(cast(EventBus, bus), redis, ttl_s=60))


async def _turn(redis: FakeAsyncRedis) -> TurnState:
    state = TurnState(
        tenant_id="t", session_id="s", request_id=RID, user_id="u",
        agent=AgentConfig(agent_id="a", model="m"), messages=[], started_at=time.time(),
    )  # fmt: skip
    return await TurnStore(redis, ttl_s=60).save(state)


def _result_event(call_id: str) -> tuple[Any, Any]:
    data = ToolResultData(round=0, call_id=call_id, tool_name="thinking", success=True)
    return ToolResultEvent, data


async def _record(
    redis: FakeAsyncRedis, emitter: EventEmitter, state: TurnState, *call_ids: str
) -> tuple[TurnState, list[Envelope], range]:
    """A result's write: the state, its events' seqs reserved and stored in the outbox."""
    envelopes, outbox = emitter.stage(state.ids(), [_result_event(c) for c in call_ids])
    saved, seqs = await TurnStore(redis, ttl_s=60).save_reserving(
        state, len(envelopes), outbox=outbox
    )
    return saved, envelopes, seqs


async def test_a_results_write_keeps_its_events_until_the_ack_takes_them_out(
    redis: FakeAsyncRedis,
) -> None:
    live = _replica(redis)
    state = await _turn(redis)
    _, envelopes, seqs = await _record(redis, live.emitter, state, "c1", "c2")
    assert seqs == range(1, 3)
    stored = await redis.hgetall(outbox_key(RID))
    assert sorted(int(seq) for seq in stored) == [1, 2]
    assert await redis.get(outbox_holder_key(RID)) == live.emitter.holder.encode()

    await live.emitter.queue_outboxed(envelopes, seqs)
    await live.emitter.flush(RID)
    assert [(e.seq, e.id) for e in live.bus.sent] == [(1, envelopes[0].id), (2, envelopes[1].id)]
    assert not await redis.exists(outbox_key(RID), outbox_holder_key(RID))


async def test_no_seq_is_reserved_past_a_live_holders_events(redis: FakeAsyncRedis) -> None:
    """Its events may still be on their way to Kafka: a later seq published first would be
    dropped by the projector. Its own emitter goes on (its producer keeps the order)."""
    holder, other = _replica(redis), _replica(redis)
    state = await _turn(redis)
    saved, _, _ = await _record(redis, holder.emitter, state, "c1")
    with pytest.raises(SeqsHeld) as held:
        await _record(redis, other.emitter, saved, "c2")
    assert not held.value.orphaned
    stored = await TurnStore(redis, ttl_s=60).load(RID)
    assert stored is not None and stored.version == saved.version, "nothing written"
    assert await redis.get(seq_key(RID)) == b"1"
    assert (await holder.emitter._reserve(RID, 1)) == range(2, 3)


async def test_a_dead_holders_events_go_out_first_at_their_seqs_in_seq_order(
    redis: FakeAsyncRedis,
) -> None:
    dead, live = _replica(redis), _replica(redis)
    state = await _turn(redis)
    saved, envelopes, _ = await _record(redis, dead.emitter, state, "c1", "c2")
    await redis.delete(outbox_holder_key(RID))  # its hold ran out: the replica is gone

    with pytest.raises(SeqsHeld) as held:
        await _record(redis, live.emitter, saved, "c3")
    assert held.value.orphaned
    await live.emitter.emit(ThoughtEvent, state.ids(), ThoughtData(round=1, delta="On."))
    assert [(e.seq, e.id) for e in live.bus.sent] == [
        (1, envelopes[0].id),
        (2, envelopes[1].id),
        (3, live.bus.sent[2].id),
    ]
    assert [type(e) for e in live.bus.sent] == [ToolResultEvent, ToolResultEvent, ThoughtEvent]
    assert not await redis.exists(outbox_key(RID), outbox_holder_key(RID))
    assert dead.bus.sent == []


async def test_a_live_holder_is_waited_for_and_its_events_not_published_again(
    redis: FakeAsyncRedis,
) -> None:
    holder, other = _replica(redis), _replica(redis)
    state = await _turn(redis)
    _, envelopes, seqs = await _record(redis, holder.emitter, state, "c1")
    await holder.emitter.queue_outboxed(envelopes, seqs)
    waiting = asyncio.create_task(other.emitter.drain(RID))
    done, _ = await asyncio.wait({waiting}, timeout=0.3)
    assert not done, "it waits while the holder holds the turn"
    await holder.emitter.flush(RID)  # acked: the holder lets go
    assert await waiting == 0
    assert other.bus.sent == []


async def test_a_catch_up_gives_back_no_seq_that_waits_in_the_outbox(
    redis: FakeAsyncRedis,
) -> None:
    """Kafka's last seq is 0 but seq 1 waits in the outbox: it is reserved, not lost."""
    holder, other = _replica(redis), _replica(redis)
    state = await _turn(redis)
    await _record(redis, holder.emitter, state, "c1")
    await redis.incrby(seq_key(RID), 2)  # deltas reserved and never published
    assert await other.emitter.recount(RID, 0) == 2
    assert await redis.get(seq_key(RID)) == b"1"


async def test_a_result_recorded_while_a_catch_up_reads_the_trail_waits(
    redis: FakeAsyncRedis,
) -> None:
    """Seq 1 is in Kafka, 2 and 3 were reserved by a step that died. While the takeover
    reads the trail, a result arriving on another replica may not reserve seq 4: once its
    event was acked and taken out of the outbox, the recount would hand 4 out again."""
    takeover, recorder = _replica(redis), _replica(redis)
    state = await _turn(redis)
    await redis.incrby(seq_key(RID), 3)
    reading, read = asyncio.Event(), asyncio.Event()

    async def last_published() -> int:
        reading.set()
        await read.wait()
        return 1

    catching_up = asyncio.create_task(takeover.emitter.catch_up(RID, last_published))
    await reading.wait()
    with pytest.raises(SeqsHeld) as held:
        await _record(redis, recorder.emitter, state, "c1")
    assert not held.value.orphaned, "held by the catch-up, which is alive"
    read.set()
    assert await catching_up == 2
    _, _, seqs = await _record(redis, recorder.emitter, state, "c1")
    assert seqs == range(2, 3)


async def test_a_failed_publish_lets_go_and_the_next_reservation_publishes_the_events(
    redis: FakeAsyncRedis,
) -> None:
    failing, live = _replica(redis), _replica(redis)
    failing.bus.broken = True
    state = await _turn(redis)
    _, envelopes, seqs = await _record(redis, failing.emitter, state, "c1")
    await failing.emitter.queue_outboxed(envelopes, seqs)
    with pytest.raises(ConnectionError):
        await failing.emitter.flush(RID)
    assert not await redis.exists(outbox_holder_key(RID)), "let go at once"
    assert await redis.exists(outbox_key(RID)), "the events stay"

    assert (await live.emitter._reserve(RID, 1)) == range(2, 3)
    assert [(e.seq, e.id) for e in live.bus.sent] == [(1, envelopes[0].id)]


def test_a_take_answer_comes_in_seq_order() -> None:
    flat = [b"10", b"{ten}", b"9", b"{nine}", b"11", b"{eleven}"]
    assert entries_by_seq(flat) == [(9, b"{nine}"), (10, b"{ten}"), (11, b"{eleven}")]
