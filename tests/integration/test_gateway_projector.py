"""The gateway's batch projector on the real Kafka and Redis (EventBus.consume_batch).

A fetch of agent events becomes one Redis pipeline and one offset commit; a record that
cannot be decoded is dead-lettered alone while the others are projected in order; a
batch handed back to Kafka (failure after the Redis write, before the commit) is written
again without duplicating any event (ARCHITECTURE invariants 1 and 3, SPEC C-05). When
Redis lost the streams, the projector writes the recent log again under the ids the
events had before, so resumes and connected readers go on without a gap or a repeat."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from pydantic import TypeAdapter
from weft_contracts import (
    CompleteData,
    CompleteEvent,
    ThoughtData,
    ThoughtEvent,
    Topic,
    TurnStartedData,
    TurnStartedEvent,
    TurnStatus,
)
from weft_contracts.envelope import Envelope
from weft_contracts.topics import TOPIC_MODELS
from weft_gateway.limits import TenantLimits, turns_key
from weft_gateway.projector import StreamProjector, log_rebuild
from weft_gateway.streams import Appended, SessionStreams, stream_key
from weft_platform.bus import Logged
from weft_platform.runtime import ServiceRuntime
from weft_platform.topic_window import read_window

from tests.integration.kafka_helpers import dead_letters, service_runtime

GARBAGE = b'{"type": "thought", "seq": "not a number"'


@pytest.fixture
async def runtime(infra: dict[str, str]) -> AsyncIterator[ServiceRuntime]:
    async with service_runtime(
        infra, "projector-test", consumer_attempts=1, consumer_retry_backoff_s=0.01
    ) as rt:
        yield rt


def _streams(rt: ServiceRuntime, tenant: str) -> SessionStreams:
    """Streams with this test's own partition marks (the Redis database is shared)."""
    return SessionStreams(
        rt.redis, max_len=1000, retention_s=120, marks_key=f"weft:test:{tenant}:marks"
    )


def _logged(events: Sequence[Envelope], first_offset: int = 0) -> list[Logged]:
    return [Logged(e, 0, first_offset + i) for i, e in enumerate(events)]


def _turn(tenant: str) -> list[Envelope]:
    ids = {"tenant_id": tenant, "session_id": "s1", "request_id": "r1"}
    started = TurnStartedData(query="q", user_id="u", agent_id="a")
    return [
        TurnStartedEvent(**ids, seq=1, data=started),
        *(ThoughtEvent(**ids, seq=s, data=ThoughtData(round=0, delta=f"d{s}")) for s in (2, 3, 4)),
        CompleteEvent(**ids, seq=5, data=CompleteData(status=TurnStatus.COMPLETED)),
    ]


async def _publish_raw(rt: ServiceRuntime, records: Sequence[bytes], key: bytes) -> None:
    """Publish before the consumer starts, so one fetch holds them all."""
    producer = AIOKafkaProducer(**rt.settings.client_options())
    await producer.start()
    try:
        for value in records:
            await producer.send_and_wait(rt.bus.topic_name(Topic.AGENT_EVENTS), value, key=key)
    finally:
        await producer.stop()


async def _stream_seqs(rt: ServiceRuntime, tenant: str, handled: asyncio.Event) -> list[int]:
    """The session stream's seqs once the handler says it has written what it was given
    (a duplicate would have been written by then)."""
    await asyncio.wait_for(handled.wait(), 30)
    entries: Any = await rt.redis.xrange(stream_key(tenant, "s1"))
    return [int(fields[b"seq"]) for _, fields in entries]


async def test_garbage_in_a_batch_is_dead_lettered_and_the_rest_projected_in_order(
    runtime: ServiceRuntime,
) -> None:
    tenant = f"t-{secrets.token_hex(6)}"
    events = _turn(tenant)
    bodies = [e.model_dump_json().encode() for e in events]
    await _publish_raw(runtime, [*bodies[:2], GARBAGE, *bodies[2:]], key=b"s1")
    limits = TenantLimits(runtime.redis, requests_per_minute=0, concurrent_turns=5, turn_ttl_s=60)
    await limits.admit_turn(tenant, "r1")
    projector = StreamProjector(_streams(runtime, tenant), limits)
    batch_sizes: list[int] = []
    all_handled = asyncio.Event()

    async def handle(batch: list[Any]) -> None:
        batch_sizes.append(len(batch))
        await projector.handle_batch(batch)
        if sum(batch_sizes) >= 5:
            all_handled.set()

    runtime.bus.consume_batch(Topic.AGENT_EVENTS, "projector", handle, positions=True)
    await runtime.broker.start()

    assert await _stream_seqs(runtime, tenant, all_handled) == [1, 2, 3, 4, 5]
    assert sum(batch_sizes) == 5 and len(batch_sizes) < 5  # batched, each event once
    [letter] = await dead_letters(runtime, 1)
    assert letter["data"]["reason"].startswith("undecodable:")
    assert letter["data"]["raw"] == GARBAGE.decode()
    assert letter["data"]["key"] == "s1"
    assert await runtime.redis.zscore(turns_key(tenant), "r1") is None  # complete freed it


async def test_batch_handed_back_after_the_redis_write_is_not_duplicated(
    runtime: ServiceRuntime,
) -> None:
    tenant = f"t-{secrets.token_hex(6)}"
    events = _turn(tenant)
    await _publish_raw(runtime, [e.model_dump_json().encode() for e in events], key=b"s1")
    projector = StreamProjector(_streams(runtime, tenant))
    calls: list[list[str]] = []
    first_written, redelivered = asyncio.Event(), asyncio.Event()

    async def crash_after_first_write(batch: list[Any]) -> None:
        calls.append([e.id for e in batch])
        await projector.handle_batch(batch)
        if len(calls) == 1:
            first_written.set()
            raise ConnectionError("lost before the commit")
        redelivered.set()  # the redelivered batch is written (or found already written)

    runtime.bus.consume_batch(
        Topic.AGENT_EVENTS, "projector", crash_after_first_write, positions=True
    )
    await runtime.broker.start()

    assert await _stream_seqs(runtime, tenant, first_written) == [1, 2, 3, 4, 5]
    assert await _stream_seqs(runtime, tenant, redelivered) == [1, 2, 3, 4, 5]
    assert calls[1][0] == calls[0][0]  # Kafka delivered the uncommitted batch again


async def test_append_many_is_one_round_trip_and_survives_a_script_flush(
    runtime: ServiceRuntime,
) -> None:
    """A batch is one pipeline of EVALSHA (no SCRIPT EXISTS before it); when Redis
    lost its scripts the batch loads the script and is written once, without duplicates."""
    tenant = f"t-{secrets.token_hex(4)}"
    streams = _streams(runtime, tenant)
    await streams.mark({0: 0})
    events = _logged(_turn(tenant))
    await runtime.redis.script_flush()
    written, known = Appended.WRITTEN, Appended.KNOWN
    assert await streams.append_many(events[:3]) == [written] * 3
    before = await _command_calls(runtime)
    assert await streams.append_many(events) == [known, known, known, written, written]
    after = await _command_calls(runtime)
    assert after.get("evalsha", 0) - before.get("evalsha", 0) == len(events)
    assert after.get("script|exists", 0) == before.get("script|exists", 0), "no SCRIPT EXISTS"
    stored = await runtime.redis.xrange(stream_key(tenant, "s1"))
    assert stored is not None
    assert [int(fields[b"seq"]) for _, fields in stored if fields] == [1, 2, 3, 4, 5]


async def _command_calls(runtime: ServiceRuntime) -> dict[str, int]:
    """Calls per command so far, from the server's own statistics."""
    stats: dict[str, Any] = await runtime.redis.info("commandstats")
    return {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()}


async def test_entry_ids_are_log_positions_and_follow_an_older_stream_in_order(
    runtime: ServiceRuntime,
) -> None:
    """An event's id is its offset + 1; in a stream whose newest id is past that (written
    before this scheme), it is the newest's successor, so order holds."""
    tenant = f"t-{secrets.token_hex(4)}"
    streams = _streams(runtime, tenant)
    await streams.mark({0: 0})
    first, second = _turn(tenant), _turn(tenant)
    await streams.append_many(_logged(first[:2], first_offset=41))
    key = stream_key(tenant, "s1")
    assert await _ids(runtime, key) == [b"42-0", b"43-0"]
    old = f"t-{secrets.token_hex(4)}"
    await runtime.redis.xadd(stream_key(old, "s1"), {"type": "x"}, id="1700000000000-3")
    await _streams(runtime, old).mark({0: 0})
    await _streams(runtime, old).append_many(_logged(_turn(old)[:2]))
    assert await _ids(runtime, stream_key(old, "s1")) == [
        b"1700000000000-3",
        b"1700000000000-4",
        b"1700000000000-5",
    ]
    assert await streams.append_many(_logged(second[:1])) == [Appended.KNOWN]


async def _ids(rt: ServiceRuntime, key: str) -> list[bytes]:
    entries: Any = await rt.redis.xrange(key)
    return [entry_id for entry_id, _ in entries]


async def _lose_streams(rt: ServiceRuntime, tenant: str) -> None:
    """What Redis coming back empty does to this test's keys (the shared database holds
    other tests' keys: no FLUSHDB)."""
    key = stream_key(tenant, "s1")
    await rt.redis.delete(key, key + ":seq", f"weft:test:{tenant}:marks")


async def _fetch(rt: ServiceRuntime, events: Sequence[Envelope]) -> list[Logged]:
    """Publish ``events`` and read them back with their log positions (the projector's
    batch as the bus hands it over)."""
    topic = rt.bus.topic_name(Topic.AGENT_EVENTS)
    await _publish_raw(rt, [e.model_dump_json().encode() for e in events], key=b"s1")
    got: list[Logged] = []
    wanted = {e.id for e in events}

    async def keep(records: Sequence[Any]) -> None:
        got.extend(Logged(_decode(r.value), r.partition, r.offset) for r in records)

    await read_window(rt.settings, topic, 0, keep)
    return [r for r in got if r.event.id in wanted]


def _decode(value: bytes) -> Envelope:
    event: Envelope = TypeAdapter(TOPIC_MODELS[Topic.AGENT_EVENTS]).validate_json(value)
    return event


@pytest.mark.parametrize("rebuilds", [True, False], ids=["rebuilt", "without-rebuild"])
async def test_streams_redis_lost_are_written_again_under_the_same_ids(
    runtime: ServiceRuntime, rebuilds: bool
) -> None:
    """Invariant 1 across a loss of Redis: events a client had not read were only in the
    lost stream. The projector's next batch finds the partition unmarked, writes the
    recent log again (the same ids: a ``Last-Event-ID`` from before the loss still
    resumes after the right event), marks it, then the batch. Without the rebuild (the
    guard's break) the older events are gone."""
    tenant = f"t-{secrets.token_hex(6)}"
    events = _turn(tenant)
    streams = _streams(runtime, tenant)
    topic = runtime.bus.topic_name(Topic.AGENT_EVENTS)
    rebuild = log_rebuild(runtime.settings, topic, 120, streams)
    projector = StreamProjector(streams, rebuild=rebuild if rebuilds else None)
    first = await _fetch(runtime, events[:3])
    await projector.handle_batch(first)
    key = stream_key(tenant, "s1")
    before: Any = await runtime.redis.xrange(key)
    await _lose_streams(runtime, tenant)
    await projector.handle_batch(await _fetch(runtime, events[3:]))
    after: Any = await runtime.redis.xrange(key)
    seqs = [int(fields[b"seq"]) for _, fields in after]
    assert seqs == ([1, 2, 3, 4, 5] if rebuilds else [4, 5])
    if rebuilds:
        assert [i for i, _ in after[:3]] == [i for i, _ in before]
        resumed: Any = await runtime.redis.xrange(key, min=f"({before[1][0].decode()}")
        assert [int(f[b"seq"]) for _, f in resumed] == [3, 4, 5]
