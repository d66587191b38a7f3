"""Gateway limits and SSE fan-out on the real Redis (no stack needed): per-tenant rate and
concurrency limits answer 429 with Retry-After; a slow SSE client is dropped while a fast
one on the same session keeps receiving every event in order (ARCHITECTURE invariant 6)."""

from __future__ import annotations

import asyncio
import json
import secrets

import pytest
from fastapi import HTTPException
from redis.asyncio import Redis
from weft_gateway.fanout import End, Follow, StreamFanout
from weft_gateway.limits import TenantLimits
from weft_gateway.sse import HEARTBEAT_FRAME
from weft_gateway.sse_response import BufferedSink
from weft_gateway.streams import stream_key


class RecordingSink:
    """A client that takes every write: the frames it was sent, in order."""

    def __init__(self) -> None:
        self.frames: list[bytes] = []
        self.written = asyncio.Event()

    def write(self, data: bytes) -> bool:
        self.frames.append(data)
        self.written.set()
        return True

    def events(self) -> list[tuple[str, str]]:
        """(event, data) of each SSE event written, heartbeats left out."""
        found = []
        for block in b"".join(self.frames).decode().split("\r\n\r\n"):
            fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
            if "event" in fields:
                found.append((fields["event"], fields["data"]))
        return found


def _follow(
    tenant_id: str,
    session_id: str,
    after: str,
    request_id: str | None,
    *,
    idle_timeout_s: float = 10,
    heartbeat_s: float | None = None,
) -> Follow:
    return Follow(
        tenant_id=tenant_id,
        session_id=session_id,
        after=after,
        request_id=request_id,
        idle_timeout_s=idle_timeout_s,
        heartbeat_s=heartbeat_s,
    )


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
    assert isinstance(entry_id, bytes)  # a client without decode_responses
    return entry_id.decode()


async def test_backlog_then_live_without_gap_or_duplicate(redis: Redis) -> None:
    tenant, session = _tenant(), "s1"
    key = stream_key(tenant, session)
    fanout = StreamFanout(redis, block_ms=100)
    first = await _append(redis, key, "r1", 1, "turn_started")
    await _append(redis, key, "r1", 2, "thought")
    sink = RecordingSink()
    watcher = asyncio.create_task(fanout.stream(_follow(tenant, session, first, "r1"), sink))
    for seq in range(3, 30):
        await _append(redis, key, "r1", seq, "thought")
    await _append(redis, key, "r2", 1, "thought")  # another turn: filtered out
    await _append(redis, key, "r1", 30, "complete")
    outcome = await asyncio.wait_for(watcher, 10)
    assert outcome.end is End.COMPLETE and outcome.request_id == "r1"
    assert [json.loads(data)["seq"] for _, data in sink.events()] == list(range(2, 31))
    await fanout.aclose()


async def test_slow_client_dropped_fast_client_unaffected(redis: Redis) -> None:
    """A client whose buffer fills is dropped alone (invariant 6); the fast one gets every
    event in order."""
    tenant, session = _tenant(), "s1"
    key = stream_key(tenant, session)
    fanout = StreamFanout(redis, block_ms=100)
    start = await _append(redis, key, "r1", 1, "turn_started")
    fast = RecordingSink()
    slow = BufferedSink(buffer_bytes=2048)  # nobody takes from it: a client that stalled
    fast_task = asyncio.create_task(fanout.stream(_follow(tenant, session, start, "r1"), fast))
    slow_task = asyncio.create_task(fanout.stream(_follow(tenant, session, start, "r1"), slow))
    for seq in range(2, 100):
        await _append(redis, key, "r1", seq, "thought")
    await _append(redis, key, "r1", 100, "complete")
    assert (await asyncio.wait_for(fast_task, 10)).end is End.COMPLETE
    types = [kind for kind, _ in fast.events()]
    assert len(types) == 99 and types[-1] == "complete"
    assert (await asyncio.wait_for(slow_task, 10)).end is End.DROPPED
    await fanout.aclose()


async def test_idle_follow_ends_idle(redis: Redis) -> None:
    fanout = StreamFanout(redis, block_ms=100)
    tenant = _tenant()
    start = await _append(redis, stream_key(tenant, "s"), "r1", 1, "turn_started")
    sink = RecordingSink()
    follow = _follow(tenant, "s", start, "r1", idle_timeout_s=0.5)
    outcome = await asyncio.wait_for(fanout.stream(follow, sink), 10)
    assert outcome.end is End.IDLE and outcome.position == start and sink.frames == []
    await fanout.aclose()


async def test_a_turn_waiting_for_a_person_is_not_idle(redis: Redis) -> None:
    """SPEC H-02: a stream silent because a person is asked is not ended as idle (its
    heartbeats go on); once the prompt is resolved the idle timeout applies again."""
    fanout = StreamFanout(redis, block_ms=100)
    tenant, key = _tenant(), ""
    key = stream_key(tenant, "s")
    start = await _append(redis, key, "r1", 1, "turn_started")
    asked = await redis.xadd(key, {"request_id": "r1", "seq": 2, "type": "tool_approval_required",
                                   "event": '{"seq":2,"data":{"prompt_id":"p1"}}'})  # fmt: skip
    sink = RecordingSink()
    follow = _follow(tenant, "s", start, "r1", idle_timeout_s=0.5, heartbeat_s=0.2)
    watcher = asyncio.create_task(fanout.stream(follow, sink))
    await asyncio.sleep(1.5)  # three idle timeouts: it must still be open
    assert not watcher.done() and asked
    await redis.xadd(key, {"request_id": "r1", "seq": 3, "type": "tool_approval_resolved",
                           "event": '{"seq":3,"data":{"prompt_id":"p1"}}'})  # fmt: skip
    outcome = await asyncio.wait_for(watcher, 10)
    assert outcome.end is End.IDLE
    await fanout.aclose()


async def test_heartbeats_come_from_the_shared_timer_while_the_turn_is_silent(
    redis: Redis,
) -> None:
    """Heartbeats (SPEC C-05) without a timer per client: the fan-out's one timer writes
    them, and the turn's events still arrive after them, in order."""
    fanout = StreamFanout(redis, block_ms=50, tick_s=0.05)
    tenant = _tenant()
    key = stream_key(tenant, "s")
    start = await _append(redis, key, "r1", 1, "turn_started")
    sink = RecordingSink()
    follow = _follow(tenant, "s", start, "r1", heartbeat_s=0.2)
    watcher = asyncio.create_task(fanout.stream(follow, sink))
    while sink.frames.count(HEARTBEAT_FRAME) < 2:
        sink.written.clear()
        await asyncio.wait_for(sink.written.wait(), 5)
    await _append(redis, key, "r1", 2, "thought")
    await _append(redis, key, "r1", 3, "complete")
    assert (await asyncio.wait_for(watcher, 10)).end is End.COMPLETE
    assert [kind for kind, _ in sink.events()] == ["thought", "complete"]
    assert sink.frames[:2] == [HEARTBEAT_FRAME, HEARTBEAT_FRAME]
    await fanout.aclose()


async def test_latest_turn_start_pages_back_to_the_newest_turn(redis: Redis) -> None:
    from weft_gateway.streams import SessionStreams

    streams = SessionStreams(redis, max_len=10_000, retention_s=120, marks_key="weft:test:marks")
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
    after = await redis.xrange(key, min=f"({start}", count=1)
    assert after and after[0][0] == second.encode()


async def test_new_session_joins_the_reader_without_waiting_out_its_block(redis: Redis) -> None:
    """A turn's first event must not wait for the shared reader's current XREAD block to
    end (it did: up to ``block_ms`` on every new turn's first SSE event)."""
    fanout = StreamFanout(redis, block_ms=4000)  # under redis-py's 5 s socket timeout
    tenant = _tenant()
    start_a = await _append(redis, stream_key(tenant, "a"), "ra", 1, "turn_started")
    watch_a = asyncio.create_task(
        fanout.stream(_follow(tenant, "a", start_a, "ra"), RecordingSink())
    )
    await asyncio.sleep(0.3)  # the reader is now blocked on session a alone
    start_b = await _append(redis, stream_key(tenant, "b"), "rb", 1, "turn_started")
    sink_b = RecordingSink()
    watch_b = asyncio.create_task(fanout.stream(_follow(tenant, "b", start_b, "rb"), sink_b))
    await asyncio.sleep(0.2)
    await _append(redis, stream_key(tenant, "b"), "rb", 2, "complete")
    await asyncio.wait_for(watch_b, 2.0)  # half the block: only a wake-up explains it
    assert sink_b.events() == [("complete", '{"seq":2}')]
    watch_a.cancel()
    await fanout.aclose()
