"""The gateway's batch projector on the real Kafka and Redis (EventBus.consume_batch).

A fetch of agent events becomes one Redis pipeline and one offset commit; a record that
cannot be decoded is dead-lettered alone while the others are projected in order; a
batch handed back to Kafka (failure after the Redis write, before the commit) is written
again without duplicating any event (ARCHITECTURE invariants 1 and 3, SPEC C-05)."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
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
from weft_gateway.limits import TenantLimits, turns_key
from weft_gateway.projector import StreamProjector
from weft_gateway.streams import SessionStreams, stream_key
from weft_platform.runtime import ServiceRuntime

from tests.integration.kafka_helpers import dead_letters, service_runtime

GARBAGE = b'{"type": "thought", "seq": "not a number"'


@pytest.fixture
async def runtime(infra: dict[str, str]) -> AsyncIterator[ServiceRuntime]:
    async with service_runtime(
        infra, "projector-test", consumer_attempts=1, consumer_retry_backoff_s=0.01
    ) as rt:
        yield rt


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
    producer = AIOKafkaProducer(bootstrap_servers=rt.settings.kafka_bootstrap)
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
    projector = StreamProjector(
        SessionStreams(runtime.redis, max_len=1000, retention_s=120), limits
    )
    batch_sizes: list[int] = []
    all_handled = asyncio.Event()

    async def handle(batch: list[Any]) -> None:
        batch_sizes.append(len(batch))
        await projector.handle_batch(batch)
        if sum(batch_sizes) >= 5:
            all_handled.set()

    runtime.bus.consume_batch(Topic.AGENT_EVENTS, "projector", handle)
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
    projector = StreamProjector(SessionStreams(runtime.redis, max_len=1000, retention_s=120))
    calls: list[list[str]] = []
    first_written, redelivered = asyncio.Event(), asyncio.Event()

    async def crash_after_first_write(batch: list[Any]) -> None:
        calls.append([e.id for e in batch])
        await projector.handle_batch(batch)
        if len(calls) == 1:
            first_written.set()
            raise ConnectionError("lost before the commit")
        redelivered.set()  # the redelivered batch is written (or found already written)

    runtime.bus.consume_batch(Topic.AGENT_EVENTS, "projector", crash_after_first_write)
    await runtime.broker.start()

    assert await _stream_seqs(runtime, tenant, first_written) == [1, 2, 3, 4, 5]
    assert await _stream_seqs(runtime, tenant, redelivered) == [1, 2, 3, 4, 5]
    assert calls[1][0] == calls[0][0]  # Kafka delivered the uncommitted batch again


async def test_append_many_is_one_round_trip_and_survives_a_script_flush(
    runtime: ServiceRuntime,
) -> None:
    """A batch is one pipeline of EVALSHA (no SCRIPT EXISTS before it); when Redis
    lost its scripts the batch loads the script and is written once, without duplicates."""
    streams = SessionStreams(runtime.redis, max_len=1000, retention_s=600)
    tenant = f"t-{secrets.token_hex(4)}"
    events = _turn(tenant)
    await runtime.redis.script_flush()
    assert await streams.append_many(events[:3]) == [True, True, True]
    before = await _command_calls(runtime)
    assert await streams.append_many(events) == [False, False, False, True, True]
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
