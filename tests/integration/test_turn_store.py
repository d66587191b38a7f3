"""TurnStore and EventEmitter on the real Redis: two replicas can never both advance one
turn; queued events keep their order and are acked before a step ends."""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from typing import Any

import pytest
from aiokafka.errors import KafkaError
from redis.asyncio import Redis
from weft_contracts import AgentConfig, Envelope, ThoughtData, ThoughtEvent, Topic
from weft_engine.emitter import EventEmitter
from weft_engine.keys import state_key
from weft_engine.leases import TurnLeases
from weft_engine.sessions import SteerInbox
from weft_engine.state import StaleTurnState, TurnState, TurnStore


def _state() -> TurnState:
    return TurnState(
        tenant_id="t", session_id="s", request_id=f"req_{secrets.token_hex(6)}", user_id="u",
        agent=AgentConfig(agent_id="a", model="m"), messages=[], started_at=time.time(),
    )  # fmt: skip


async def _opened(redis: Redis) -> dict[str, Any]:
    """The ids of a turn whose state is stored, as an opened turn's is: its seq counter
    exists (the emitter counts only on an existing one)."""
    saved = await TurnStore(redis, ttl_s=60).save(_state())
    return {**saved.ids(), "traceparent": None}


async def test_save_then_load_round_trips(redis: Redis) -> None:
    store = TurnStore(redis, ttl_s=60)
    saved = await store.save(_state())
    loaded = await store.load(saved.request_id)
    assert loaded == saved and saved.version == 1
    await store.delete(saved.request_id)
    assert await store.load(saved.request_id) is None


async def test_a_state_written_by_a_later_engine_loads_and_advances(redis: Redis) -> None:
    """Rolling deploys: replicas of two versions share turns, so a state with fields this
    version lacks loads (they are ignored, weft_contracts.compat) and can be saved again."""
    store = TurnStore(redis, ttl_s=60)
    saved = await store.save(_state())
    written = json.loads(saved.model_dump_json())
    written["added_later"] = {"by": "a later engine"}
    written["agent"]["added_later_too"] = 1
    await redis.set(state_key(saved.request_id), json.dumps(written))
    loaded = await store.load(saved.request_id)
    assert loaded == saved
    advanced = await store.save(loaded.model_copy(update={"round": 1}))
    assert advanced.version == 2


async def test_stale_writer_loses(redis: Redis) -> None:
    store = TurnStore(redis, ttl_s=60)
    base = await store.save(_state())
    replica_a = base.model_copy(update={"round": 1})
    replica_b = base.model_copy(update={"round": 2})
    await store.save(replica_a)
    with pytest.raises(StaleTurnState):
        await store.save(replica_b)
    stored = await store.load(base.request_id)
    assert stored is not None and stored.round == 1


async def test_a_tool_deadline_is_written_only_with_the_state(redis: Redis) -> None:
    """SPEC E-17: the deadline that wakes a turn whose tools never answer travels in the
    state's compare-and-set (one round trip); a stale writer changes neither."""
    store = TurnStore(redis, ttl_s=60)
    leases = TurnLeases(redis, owner="a", namespace=f"t{secrets.token_hex(4)}.", ttl_s=6)
    base = await store.save(_state())
    rid = base.request_id
    waiting = await store.save(base, deadline=leases.deadline(rid, time.time() - 1))
    assert await leases.due() == [rid]
    with pytest.raises(StaleTurnState):
        await store.save(base, deadline=leases.deadline(rid, None))  # version 1 is stale
    assert await leases.due() == [rid], "a stale writer cleared the deadline"
    await store.save(waiting, deadline=leases.deadline(rid, None))
    assert await leases.due() == []
    await store.delete(rid)


async def test_steer_messages_are_taken_once_in_order_with_the_stop_flag(redis: Redis) -> None:
    """SPEC E-13: a think takes every waiting steer message, in order, exactly once, and
    learns in the same round trip whether the turn was stopped."""
    inbox = SteerInbox(redis, ttl_s=60)
    rid = f"req_{secrets.token_hex(6)}"
    cancel = f"weft:turn:{rid}:cancel"
    assert await inbox.poll(rid, cancel) == (False, [])
    for text in ("one", "two", "three"):
        await inbox.put(rid, text)
    await redis.set(cancel, 1, ex=60)
    assert await inbox.poll(rid, cancel) == (True, ["one", "two", "three"])
    assert await inbox.poll(rid, cancel) == (True, [])
    await redis.delete(cancel)


class _QueueingBus:
    """Records what the emitter publishes; acks of queued events are settled by the test."""

    def __init__(self) -> None:
        self.sent: list[Envelope] = []
        self.futures: list[asyncio.Future[Any]] = []

    async def publish(self, topic: Topic, message: Envelope) -> None:
        self.sent.append(message)

    async def publish_nowait(self, topic: Topic, message: Envelope) -> asyncio.Future[Any]:
        self.sent.append(message)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.futures.append(future)
        return future


async def _flush_waits_for_the_acks(
    emitter: EventEmitter, bus: _QueueingBus, request_id: str
) -> None:
    flushing = asyncio.create_task(emitter.flush(request_id))
    await asyncio.sleep(0)
    assert not flushing.done(), "flush returned before the queued events were acked"
    for future in bus.futures:
        future.set_result(None)
    await flushing


async def test_queued_events_keep_seq_order_and_flush_waits_for_their_acks(
    redis: Redis,
) -> None:  # invariant 1 (acks overlap the next step)
    bus = _QueueingBus()
    emitter = EventEmitter(bus, redis, ttl_s=60)  # type: ignore[arg-type]
    ids = await _opened(redis)
    for delta in ("a", "b"):
        await emitter.emit(ThoughtEvent, ids, ThoughtData(round=0, delta=delta), wait=False)
    await emitter.emit(ThoughtEvent, ids, ThoughtData(round=0, delta="c"))
    assert [m.seq for m in bus.sent] == [1, 2, 3]
    await _flush_waits_for_the_acks(emitter, bus, ids["request_id"])


async def test_events_queued_together_take_consecutive_seqs_in_one_round_trip(
    redis: Redis,
) -> None:  # invariant 1 (a round's tool_call events share one produce request)
    bus = _QueueingBus()
    emitter = EventEmitter(bus, redis, ttl_s=60)  # type: ignore[arg-type]
    ids = await _opened(redis)
    await emitter.emit(ThoughtEvent, ids, ThoughtData(round=0, delta="a"), wait=False)
    together = [(ThoughtEvent, ThoughtData(round=0, delta=d)) for d in ("b", "c", "d")]
    await emitter.emit_many(ids, together)  # type: ignore[arg-type]
    await emitter.emit(ThoughtEvent, ids, ThoughtData(round=0, delta="e"), wait=False)
    sent = [(m.seq, m.model_dump()["data"]["delta"]) for m in bus.sent]
    assert sent == list(enumerate("abcde", start=1))
    assert await redis.ttl(f"weft:turn:{ids['request_id']}:seq") > 0
    await _flush_waits_for_the_acks(emitter, bus, ids["request_id"])


async def test_a_state_write_reserves_seqs_on_the_emitters_counter(redis: Redis) -> None:
    """A round's tool_call events take their seqs in the state's own write; the
    counter is the emitter's, so the turn's events stay numbered in order; a stale write
    reserves nothing."""
    store = TurnStore(redis, ttl_s=60)
    bus = _QueueingBus()
    emitter = EventEmitter(bus, redis, ttl_s=60)  # type: ignore[arg-type]
    state = await store.save(_state())
    ids = {**state.ids(), "traceparent": None}
    await emitter.emit(ThoughtEvent, ids, ThoughtData(round=0, delta="a"), wait=False)
    saved, seqs = await store.save_reserving(state, 2)
    assert (saved.version, list(seqs)) == (state.version + 1, [2, 3])
    calls = [(ThoughtEvent, ThoughtData(round=0, delta=d)) for d in ("b", "c")]
    await emitter.queue_reserved(ids, calls, seqs)  # type: ignore[arg-type]
    with pytest.raises(StaleTurnState):
        await store.save_reserving(state, 5)  # version already taken
    await emitter.emit(ThoughtEvent, ids, ThoughtData(round=0, delta="d"), wait=False)
    assert [m.seq for m in bus.sent] == [1, 2, 3, 4]
    assert await redis.ttl(f"weft:turn:{state.request_id}:seq") > 0
    await store.delete(state.request_id)


async def test_a_failed_queued_event_fails_the_flush(redis: Redis) -> None:  # invariant 2
    bus = _QueueingBus()
    emitter = EventEmitter(bus, redis, ttl_s=60)  # type: ignore[arg-type]
    ids = await _opened(redis)
    await emitter.emit(ThoughtEvent, ids, ThoughtData(round=0, delta="a"), wait=False)
    bus.futures[0].set_exception(KafkaError("broker gone"))
    with pytest.raises(KafkaError):
        await emitter.flush(ids["request_id"])
    await emitter.flush(ids["request_id"])  # nothing left to wait for
