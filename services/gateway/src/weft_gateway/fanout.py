"""StreamFanout: one Redis reader per watched session, shared by every SSE client of it.

Thousands of SSE clients on one gateway process must not mean thousands of blocking
``XREAD`` connections to Redis: one reader task per process follows every watched session
stream with a single multi-stream ``XREAD`` and copies new entries into one bounded queue
per subscriber. A subscriber
whose queue is full is a slow client: it is dropped (its queue closed) and nobody else
waits for it (ARCHITECTURE invariant 6). A dropped client can reconnect with
``Last-Event-ID`` and lose nothing.

A subscriber first registers its queue, then reads the backlog after its position with
``XRANGE``; live entries that the backlog already covered are skipped by position, so no
event is missed or repeated between the two (invariant 1).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import structlog
from redis.asyncio import Redis
from redis.exceptions import RedisError

from weft_gateway.streams import TERMINAL, StreamEntry, parse_position, stream_entry, stream_key

log = structlog.get_logger()


class SlowClient(Exception):
    """The subscriber fell ``queue_size`` events behind and was dropped."""


@dataclass(eq=False)
class _Subscriber:
    queue: asyncio.Queue[StreamEntry | None]
    dropped: bool = False


@dataclass(eq=False)
class _Watched:
    position: str
    subscribers: set[_Subscriber] = field(default_factory=set)


class StreamFanout:
    """Shares one ``XREAD`` loop among all the process's SSE clients."""

    def __init__(self, redis: Redis, *, queue_size: int = 1000, block_ms: int = 200):
        self._redis = redis
        self._queue_size = queue_size
        # A newly watched stream joins the loop at its next XREAD: short blocks keep that
        # join delay small (its backlog is read directly, so nothing is missed).
        self._block_ms = block_ms
        self._watched: dict[str, _Watched] = {}
        self._task: asyncio.Task[None] | None = None

    async def follow(
        self,
        tenant_id: str,
        session_id: str,
        after: str,
        *,
        request_id: str | None,
        idle_timeout_s: float,
    ) -> AsyncGenerator[StreamEntry | None, None]:
        """Entries after ``after`` (of one turn when ``request_id`` is given) until that
        turn's ``complete``; yields None once after ``idle_timeout_s`` without any event.
        Raises :class:`SlowClient` when this subscriber could not keep up."""
        key = stream_key(tenant_id, session_id)
        sub = await self._subscribe(key)
        try:
            last = parse_position(after)
            backlog: Any = await self._redis.xrange(key, min=f"({after}", count=10_000)
            pending = [stream_entry(eid.decode(), fields) for eid, fields in backlog]
            async for entry in self._entries(sub, pending, idle_timeout_s):
                if entry is None:
                    yield None
                    return
                position = parse_position(entry.entry_id)
                if position <= last:
                    continue
                last = position
                if request_id and entry.request_id != request_id:
                    continue
                yield entry
                if entry.type == TERMINAL:
                    return
        finally:
            self._unsubscribe(key, sub)

    async def _entries(
        self, sub: _Subscriber, pending: list[StreamEntry], idle_timeout_s: float
    ) -> AsyncIterator[StreamEntry | None]:
        for entry in pending:
            yield entry
        while True:
            try:
                live: StreamEntry | None = await asyncio.wait_for(sub.queue.get(), idle_timeout_s)
            except TimeoutError:
                yield None
                return
            if live is None:
                raise SlowClient("SSE client too slow: dropped, reconnect with Last-Event-ID")
            yield live

    async def _subscribe(self, key: str) -> _Subscriber:
        sub = _Subscriber(asyncio.Queue(self._queue_size))
        watched = self._watched.get(key)
        if watched is None:
            newest: Any = await self._redis.xrevrange(key, count=1)
            watched = self._watched.get(key)  # another client may have won the await
            if watched is None:
                watched = _Watched(newest[0][0].decode() if newest else "0-0")
                self._watched[key] = watched
        watched.subscribers.add(sub)
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._read())
        return sub

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
            try:
                batch: Any = await self._redis.xread(positions, block=self._block_ms, count=500)
            except RedisError:
                log.warning("fanout_read_failed", streams=len(positions))
                await asyncio.sleep(0.5)  # subscribers time out if Redis stays away
                continue
            for raw_key, entries in batch or []:
                watched = self._watched.get(raw_key.decode())
                if watched is None:
                    continue
                for entry_id, fields in entries:
                    watched.position = entry_id.decode()
                    self._broadcast(watched, stream_entry(watched.position, fields))

    @staticmethod
    def _broadcast(watched: _Watched, entry: StreamEntry) -> None:
        for sub in list(watched.subscribers):
            if sub.dropped:
                continue
            try:
                sub.queue.put_nowait(entry)
            except asyncio.QueueFull:
                sub.dropped = True
                # Make room for the drop signal: the client is gone either way.
                with contextlib.suppress(asyncio.QueueEmpty):
                    sub.queue.get_nowait()
                sub.queue.put_nowait(None)

    async def aclose(self) -> None:
        """Stop the reader task."""
        self._watched.clear()
        if self._task is not None:
            self._task.cancel()
