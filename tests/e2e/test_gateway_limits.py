"""Gateway limits and SSE fan-out on the real Redis (no stack needed): per-tenant rate and
concurrency limits answer 429 with Retry-After; a slow SSE client is dropped while a fast
one on the same session keeps receiving every event in order (ARCHITECTURE invariant 6)."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any

import pytest
from fastapi import HTTPException
from redis.asyncio import Redis
from weft_gateway.fanout import SlowClient, StreamFanout
from weft_gateway.limits import TenantLimits
from weft_gateway.streams import stream_key


@pytest.fixture
async def redis(infra: dict[str, str]) -> AsyncIterator[Redis]:
    client = Redis.from_url(infra["WEFT_REDIS_URL"])
    yield client
    await client.aclose()


async def follow(
    fanout: StreamFanout, tenant_id: str, session_id: str, after: str, **kwargs: Any
) -> AsyncIterator[Any]:
    """The fan-out's chunks for one client, item by item."""
    chunks = fanout.follow_chunks(tenant_id, session_id, after, **kwargs)
    async with aclosing(chunks):
        async for chunk in chunks:
            for item in chunk:
                yield item


def _tenant() -> str:
    return f"t-{secrets.token_hex(6)}"


async def test_rate_limit_answers_429_with_retry_after(redis: Redis) -> None:
    limits = TenantLimits(redis, requests_per_minute=3, concurrent_turns=5, turn_ttl_s=60)
    tenant, other = _tenant(), _tenant()
    for _ in range(3):
        await limits.check_rate(tenant)
    with pytest.raises(HTTPException) as err:
        await limits.check_rate(tenant)
    assert err.value.status_code == 429
    assert err.value.headers is not None and 1 <= int(err.value.headers["Retry-After"]) <= 60
    await limits.check_rate(other)  # another tenant is not affected


async def test_concurrent_turn_limit_and_release(redis: Redis) -> None:
    limits = TenantLimits(redis, requests_per_minute=0, concurrent_turns=2, turn_ttl_s=60)
    tenant = _tenant()
    await limits.admit_turn(tenant, "r1")
    await limits.admit_turn(tenant, "r2")
    with pytest.raises(HTTPException) as err:
        await limits.admit_turn(tenant, "r3")
    assert err.value.status_code == 429 and err.value.headers == {"Retry-After": "5"}
    await limits.release_turn(tenant, "r1")
    await limits.admit_turn(tenant, "r3")
    await limits.admit_turn(_tenant(), "r4")


async def _append(redis: Redis, key: str, request_id: str, seq: int, kind: str) -> str:
    entry_id = await redis.xadd(
        key, {"request_id": request_id, "seq": seq, "type": kind, "event": f'{{"seq":{seq}}}'}
    )
    await redis.expire(key, 120)
    return entry_id.decode()


async def test_backlog_then_live_without_gap_or_duplicate(redis: Redis) -> None:
    tenant, session = _tenant(), "s1"
    key = stream_key(tenant, session)
    fanout = StreamFanout(redis, block_ms=100)
    first = await _append(redis, key, "r1", 1, "turn_started")
    await _append(redis, key, "r1", 2, "thought")
    received: list[int] = []

    async def watch() -> None:
        async for entry in follow(
            fanout, tenant, session, first, request_id="r1", idle_timeout_s=10
        ):
            assert entry is not None
            received.append(int(entry.event_json.split(":")[1].rstrip("}")))

    watcher = asyncio.create_task(watch())
    for seq in range(3, 30):
        await _append(redis, key, "r1", seq, "thought")
    await _append(redis, key, "r2", 1, "thought")  # another turn: filtered out
    await _append(redis, key, "r1", 30, "complete")
    await asyncio.wait_for(watcher, 10)
    assert received == list(range(2, 31))
    await fanout.aclose()


async def test_slow_client_dropped_fast_client_unaffected(redis: Redis) -> None:
    tenant, session = _tenant(), "s1"
    key = stream_key(tenant, session)
    fanout = StreamFanout(redis, queue_size=10, block_ms=100)
    start = await _append(redis, key, "r1", 1, "turn_started")
    fast: list[str] = []
    slow_started = asyncio.Event()

    async def fast_client() -> None:
        async for entry in follow(
            fanout, tenant, session, start, request_id="r1", idle_timeout_s=10
        ):
            assert entry is not None
            fast.append(entry.type)

    async def slow_client() -> None:
        stream = follow(fanout, tenant, session, start, request_id="r1", idle_timeout_s=10)
        await stream.__anext__()  # subscribed; then never reads again until the flood is over
        slow_started.set()
        await asyncio.sleep(1.5)
        async for _ in stream:
            pass

    fast_task = asyncio.create_task(fast_client())
    slow_task = asyncio.create_task(slow_client())
    await _append(redis, key, "r1", 2, "thought")
    await asyncio.wait_for(slow_started.wait(), 10)
    for seq in range(3, 100):
        await _append(redis, key, "r1", seq, "thought")
    await _append(redis, key, "r1", 100, "complete")
    await asyncio.wait_for(fast_task, 10)
    assert len(fast) == 99 and fast[-1] == "complete"
    with pytest.raises(SlowClient):
        await asyncio.wait_for(slow_task, 10)
    await fanout.aclose()


async def test_idle_follow_yields_none(redis: Redis) -> None:
    fanout = StreamFanout(redis, block_ms=100)
    tenant = _tenant()
    start = await _append(redis, stream_key(tenant, "s"), "r1", 1, "turn_started")
    got = [e async for e in follow(fanout, tenant, "s", start, request_id="r1", idle_timeout_s=0.5)]
    assert got == [None]
    await fanout.aclose()


async def test_heartbeats_come_from_the_shared_timer_while_the_turn_is_silent(
    redis: Redis,
) -> None:
    """Heartbeats (SPEC C-05) without a timer per client: the fan-out's one timer hands
    them out, and the turn's events still arrive after them, in order."""
    from weft_gateway.fanout import HEARTBEAT

    fanout = StreamFanout(redis, block_ms=50, tick_s=0.05)
    tenant = _tenant()
    key = stream_key(tenant, "s")
    start = await _append(redis, key, "r1", 1, "turn_started")
    got: list[object] = []
    two_heartbeats = asyncio.Event()

    async def watch() -> None:
        async for item in follow(
            fanout, tenant, "s", start, request_id="r1", idle_timeout_s=10, heartbeat_s=0.2
        ):
            got.append(item if item is HEARTBEAT else getattr(item, "type", item))
            if got.count(HEARTBEAT) == 2:
                two_heartbeats.set()

    watcher = asyncio.create_task(watch())
    await asyncio.wait_for(two_heartbeats.wait(), 10)
    await _append(redis, key, "r1", 2, "thought")
    await _append(redis, key, "r1", 3, "complete")
    await asyncio.wait_for(watcher, 10)
    assert got[-2:] == ["thought", "complete"] and None not in got
    await fanout.aclose()


async def test_latest_turn_start_pages_back_to_the_newest_turn(redis: Redis) -> None:
    from weft_gateway.streams import SessionStreams

    streams = SessionStreams(redis, max_len=10_000, retention_s=120)
    tenant = _tenant()
    key = stream_key(tenant, "s")
    assert await streams.latest_turn_start(tenant, "s") is None
    await _append(redis, key, "r1", 1, "turn_started")
    await _append(redis, key, "r1", 2, "complete")
    second = await _append(redis, key, "r2", 1, "turn_started")
    for seq in range(2, 350):  # more than three pages after the turn's start
        await _append(redis, key, "r2", seq, "thought")
    start = await streams.latest_turn_start(tenant, "s")
    assert start is not None
    after: list[tuple[bytes, dict[bytes, bytes]]] = await redis.xrange(
        key, min=f"({start}", count=1
    )
    assert after[0][0].decode() == second


async def test_new_session_joins_the_reader_without_waiting_out_its_block(redis: Redis) -> None:
    """A turn's first event must not wait for the shared reader's current XREAD block to
    end (it did: up to ``block_ms`` on every new turn's first SSE event)."""
    fanout = StreamFanout(redis, block_ms=4000)  # under redis-py's 5 s socket timeout
    tenant = _tenant()
    start_a = await _append(redis, stream_key(tenant, "a"), "ra", 1, "turn_started")
    watch_a = asyncio.create_task(
        _drain(follow(fanout, tenant, "a", start_a, request_id="ra", idle_timeout_s=30))
    )
    await asyncio.sleep(0.3)  # the reader is now blocked on session a alone
    start_b = await _append(redis, stream_key(tenant, "b"), "rb", 1, "turn_started")
    watch_b = asyncio.create_task(
        _drain(follow(fanout, tenant, "b", start_b, request_id="rb", idle_timeout_s=30))
    )
    await asyncio.sleep(0.2)
    await _append(redis, stream_key(tenant, "b"), "rb", 2, "complete")
    got = await asyncio.wait_for(watch_b, 2.0)  # half the block: only a wake-up explains it
    assert [e.event_json for e in got if e is not None] == ['{"seq":2}']
    watch_a.cancel()
    await fanout.aclose()


async def _drain(entries: AsyncIterator[object]) -> list[Any]:
    return [entry async for entry in entries]
