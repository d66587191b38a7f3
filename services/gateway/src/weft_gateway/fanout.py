"""StreamFanout: one Redis reader per gateway process, shared by every SSE client.

Thousands of SSE clients on one gateway process must not mean thousands of blocking
``XREAD`` connections to Redis, nor thousands of timers: one task per process

* follows every watched session stream with a single multi-stream ``XREAD`` (blocking at
  most ``block_ms``, well under redis-py's 5 s socket timeout) and puts each new entry,
  one shared :class:`StreamEntry` object, into one bounded queue per subscriber;
* every ``tick_s`` hands out the timer events: a heartbeat to a subscriber that was sent
  nothing for its heartbeat interval, the idle signal to one whose session has been
  silent for its idle timeout, and the end of every stream when the server shuts down.

A subscriber whose queue is full is a slow client: it is dropped (its queue closed) and
nobody else waits for it (ARCHITECTURE invariant 6). A dropped client can reconnect with
``Last-Event-ID`` and lose nothing.

A subscriber first registers its queue, then reads the backlog after its position with
``XRANGE``; live entries that the backlog already covered are skipped by position, so no
event is missed or repeated between the two (invariant 1).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import structlog
from redis.asyncio import Redis
from redis.exceptions import RedisError
from sse_starlette.sse import AppStatus

from weft_gateway.streams import TERMINAL, StreamEntry, parse_position, stream_entry, stream_key

log = structlog.get_logger()


class SlowClient(Exception):
    """The subscriber fell ``queue_size`` events behind and was dropped."""


class Signal(Enum):
    """What the fan-out's timer puts in a subscriber's queue besides entries."""

    HEARTBEAT = "heartbeat"
    IDLE = "idle"
    DROPPED = "dropped"
    SHUTDOWN = "shutdown"


HEARTBEAT = Signal.HEARTBEAT
"""Yielded by :meth:`StreamFanout.follow_chunks` when a heartbeat is due (only if asked for)."""

Item = StreamEntry | Signal | None
"""What a subscriber receives: an entry, :data:`HEARTBEAT`, or None (idle: the end)."""


@dataclass(eq=False)
class _Subscriber:
    queue: asyncio.Queue[StreamEntry | Signal]
    idle_timeout_s: float
    heartbeat_s: float | None
    since: float = field(default_factory=time.monotonic)
    """Start of the current silence: subscription, then the last entry received."""
    last_sent: float = field(default_factory=time.monotonic)
    closed: bool = False


@dataclass(eq=False)
class _Watched:
    position: str
    subscribers: set[_Subscriber] = field(default_factory=set)


class StreamFanout:
    """Shares one ``XREAD`` loop and one timer among all the process's SSE clients."""

    def __init__(
        self,
        redis: Redis,
        *,
        queue_size: int = 1000,
        block_ms: int = 200,
        tick_s: float = 0.25,
    ):
        self._redis = redis
        self._queue_size = queue_size
        # A newly watched stream joins the loop at its next XREAD; an entry on this
        # process's wake stream ends the current block at once, so a new turn's first
        # event does not wait out ``block_ms`` (its backlog is read directly, too).
        self._block_ms = block_ms
        self._wake_key = f"weft:fanout:wake:{uuid.uuid4().hex}"
        self._wake_position = "0-0"
        self._tick_s = tick_s
        self._watched: dict[str, _Watched] = {}
        self._task: asyncio.Task[None] | None = None
        self._next_tick = 0.0

    async def follow_chunks(
        self,
        tenant_id: str,
        session_id: str,
        after: str,
        *,
        request_id: str | None,
        idle_timeout_s: float,
        heartbeat_s: float | None = None,
    ) -> AsyncGenerator[list[Item], None]:
        """Entries after ``after`` (of one turn when ``request_id`` is given) until that
        turn's ``complete``, by chunks: everything queued for this client when it gets to
        run, so a client that fell behind catches up with one write, not one per event.

        None comes once after ``idle_timeout_s`` without any event of the session, and
        :data:`HEARTBEAT` every ``heartbeat_s`` without anything sent. Ends early, without
        a terminator, when the server shuts down (the client resumes elsewhere with
        ``Last-Event-ID``). Raises :class:`SlowClient` when this subscriber could not
        keep up."""
        key = stream_key(tenant_id, session_id)
        sub = await self._subscribe(key, idle_timeout_s, heartbeat_s)
        try:
            last = parse_position(after)
            backlog: Any = await self._redis.xrange(key, min=f"({after}", count=10_000)
            pending = [stream_entry(eid.decode(), fields) for eid, fields in backlog]
            async for items in self._chunks(sub, pending):
                chunk: list[Item] = []
                for item in items:
                    if not isinstance(item, StreamEntry):  # None (idle) or a heartbeat
                        chunk.append(item)
                        continue
                    if item.position <= last:
                        continue
                    last = item.position
                    if not request_id or item.request_id == request_id:
                        chunk.append(item)
                        if item.type == TERMINAL:
                            break
                if chunk:
                    yield chunk
                    if chunk[-1] is None or getattr(chunk[-1], "type", None) == TERMINAL:
                        return
        finally:
            self._unsubscribe(key, sub)

    async def _chunks(
        self, sub: _Subscriber, pending: list[StreamEntry]
    ) -> AsyncIterator[list[Item]]:
        if pending:
            yield list(pending)
        while True:
            queued = [await sub.queue.get()]
            while not sub.queue.empty():
                queued.append(sub.queue.get_nowait())
            chunk: list[Item] = []
            for item in queued:
                if item is Signal.SHUTDOWN:  # the client resumes on another replica
                    if chunk:
                        yield chunk
                    return
                if item is Signal.IDLE:
                    yield [*chunk, None]
                    return
                if item is Signal.DROPPED:
                    if chunk:
                        yield chunk
                    raise SlowClient("SSE client too slow: dropped, reconnect with Last-Event-ID")
                chunk.append(item)
            yield chunk

    async def _subscribe(
        self, key: str, idle_timeout_s: float, heartbeat_s: float | None
    ) -> _Subscriber:
        sub = _Subscriber(asyncio.Queue(self._queue_size), idle_timeout_s, heartbeat_s)
        watched = self._watched.get(key)
        if watched is None:
            newest: Any = await self._redis.xrevrange(key, count=1)
            watched = self._watched.get(key)  # another client may have won the await
            if watched is None:
                watched = _Watched(newest[0][0].decode() if newest else "0-0")
                self._watched[key] = watched
                if self._task is not None and not self._task.done():
                    await self._wake_reader()
        watched.subscribers.add(sub)
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._read())
        return sub

    async def _wake_reader(self) -> None:
        """End the reader's blocking XREAD so it picks up a newly watched stream now."""
        try:
            async with self._redis.pipeline(transaction=False) as pipe:
                pipe.xadd(self._wake_key, {"w": "1"}, maxlen=16, approximate=False)
                pipe.expire(self._wake_key, 3600)  # nothing is left behind by a dead process
                await pipe.execute()
        except RedisError:  # the block still ends on its own within block_ms
            log.warning("fanout_wake_failed")

    def _unsubscribe(self, key: str, sub: _Subscriber) -> None:
        watched = self._watched.get(key)
        if watched is None:
            return
        watched.subscribers.discard(sub)
        if not watched.subscribers:
            del self._watched[key]

    async def _read(self) -> None:
        while self._watched:
            positions: dict[Any, Any] = {k: w.position for k, w in self._watched.items()}
            positions[self._wake_key] = self._wake_position
            try:
                batch: Any = await self._redis.xread(positions, block=self._block_ms, count=500)
            except RedisError:
                log.warning("fanout_read_failed", streams=len(positions))
                await asyncio.sleep(0.5)  # subscribers time out if Redis stays away
                batch = None
            now = time.monotonic()
            for raw_key, entries in batch or []:
                if raw_key.decode() == self._wake_key:
                    self._wake_position = entries[-1][0].decode()
                    continue
                watched = self._watched.get(raw_key.decode())
                if watched is None:
                    continue
                for entry_id, fields in entries:
                    watched.position = entry_id.decode()
                    self._broadcast(watched, stream_entry(watched.position, fields), now)
            if now >= self._next_tick:
                self._next_tick = now + self._tick_s
                self._tick(now)

    def _broadcast(self, watched: _Watched, entry: StreamEntry, now: float) -> None:
        for sub in watched.subscribers:
            sub.since = sub.last_sent = now
            self._put(sub, entry)

    def _tick(self, now: float) -> None:
        """Hand out heartbeats, idle signals and, on server shutdown, the end of streams."""
        shutdown = AppStatus.should_exit
        for watched in self._watched.values():
            for sub in watched.subscribers:
                if shutdown:
                    self._close(sub, Signal.SHUTDOWN)
                elif now - sub.since >= sub.idle_timeout_s:
                    self._close(sub, Signal.IDLE)
                elif sub.heartbeat_s is not None and now - sub.last_sent >= sub.heartbeat_s:
                    sub.last_sent = now
                    self._put(sub, HEARTBEAT)

    def _put(self, sub: _Subscriber, item: StreamEntry | Signal) -> None:
        if sub.closed:
            return
        try:
            sub.queue.put_nowait(item)
        except asyncio.QueueFull:
            self._close(sub, Signal.DROPPED)

    @staticmethod
    def _close(sub: _Subscriber, signal: Signal) -> None:
        """End a subscriber's stream with ``signal``; nothing more is queued for it."""
        if sub.closed:
            return
        sub.closed = True
        if sub.queue.full():  # make room: the client is being ended either way
            with contextlib.suppress(asyncio.QueueEmpty):
                sub.queue.get_nowait()
        sub.queue.put_nowait(signal)

    async def aclose(self) -> None:
        """Stop the reader task."""
        self._watched.clear()
        if self._task is not None:
            self._task.cancel()
