"""StreamFanout: one Redis reader per gateway process, writing to every SSE client.

Thousands of SSE clients on one gateway process must not mean thousands of blocking
``XREAD`` connections to Redis, nor thousands of tasks woken for every event. One task
per process

* follows every watched session stream with a single multi-stream ``XREAD`` (blocking at
  most ``block_ms``, well under redis-py's 5 s socket timeout) and, for each new entry,
  writes its encoded frame (built once, shared) to the :class:`Sink` of every subscriber
  of the session, synchronously: no queue, no task switch per client and event;
* every ``tick_s`` hands out the timer events: a heartbeat to a subscriber that was sent
  nothing for its heartbeat interval, the idle end to one whose session has been silent
  for its idle timeout, and the end of every stream when the server shuts down.

A sink that refuses a write (its client's buffer is full, or the client is gone) ends that
subscriber alone with :attr:`End.DROPPED`; nobody else waits for it (ARCHITECTURE
invariant 6). A dropped client can reconnect with ``Last-Event-ID`` and lose nothing.

A subscriber first registers, collecting live entries while it reads the backlog after its
position with ``XRANGE``; live entries that the backlog already covered are skipped by
position, so no event is missed or repeated between the two (invariant 1).
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Protocol

import structlog
from redis.asyncio import Redis
from redis.exceptions import RedisError
from sse_starlette.sse import AppStatus

from weft_gateway.sse import HEARTBEAT_FRAME, StreamFormat, frame
from weft_gateway.sse_metrics import sent
from weft_gateway.streams import TERMINAL, StreamEntry, parse_position, stream_entry, stream_key

log = structlog.get_logger()


class Sink(Protocol):
    """Where a subscriber's frames go: the client's connection, or a buffer before it."""

    def write(self, data: bytes) -> bool:
        """Take ``data`` (one or more whole frames) without waiting; False when the client
        cannot take it (too far behind, or gone): the subscriber is then dropped."""
        ...


class End(Enum):
    """Why a subscriber's stream ended."""

    COMPLETE = "complete"
    """The followed turn's ``complete`` was written."""
    IDLE = "idle"
    """No event of the session for the idle timeout."""
    DROPPED = "dropped"
    """The client could not keep up (or went away)."""
    SHUTDOWN = "shutdown"
    """The server is stopping: the client resumes elsewhere with ``Last-Event-ID``."""
    UNAVAILABLE = "unavailable"
    """The stream store could not be read (set by the caller of :meth:`StreamFanout.stream`)."""


_PROMPT_TYPES = frozenset({"tool_approval_required", "tool_approval_resolved"})


@dataclass(frozen=True, kw_only=True)
class Follow:
    """What one client follows: a session's events after ``after``, only those of turn
    ``request_id`` when it is given, until that turn's ``complete``."""

    tenant_id: str
    session_id: str
    after: str
    request_id: str | None
    fmt: StreamFormat = "native"
    idle_timeout_s: float
    heartbeat_s: float | None = None
    asking: frozenset[str] = frozenset()
    """Prompts of the session that wait for a person when the client (re)joins (from
    memory): a stream that waits for a person is not idle (SPEC H-02)."""


@dataclass(frozen=True)
class Outcome:
    """How a followed stream ended, and the last event the client was sent (the position
    a synthetic ending carries, so a resume from it still gets anything later)."""

    end: End
    position: str
    request_id: str | None


class _Subscriber:
    """One client: filters, de-duplicates and frames entries, and writes them to its sink."""

    __slots__ = (
        "asking",
        "ended",
        "follow",
        "last",
        "last_sent",
        "pending",
        "position",
        "since",
        "sink",
        "turn",
    )

    def __init__(self, follow: Follow, sink: Sink, ended: asyncio.Future[End]):
        self.follow = follow
        self.sink = sink
        self.ended = ended
        self.last = parse_position(follow.after)
        self.position = follow.after
        self.turn = follow.request_id
        self.since = self.last_sent = time.monotonic()
        """Start of the current silence of the session; time of the last write."""
        self.pending: list[StreamEntry] | None = []
        """Live entries that came while the backlog was read; None once live."""
        self.asking = set(follow.asking)
        """Prompts waiting for a person: no idle end while there is one (heartbeats go on)."""

    def offer(self, entry: StreamEntry, now: float) -> None:
        """A live entry of the session."""
        self.since = now
        if self.pending is not None:
            self.pending.append(entry)
        else:
            self.deliver((entry,), now)

    def deliver(self, entries: tuple[StreamEntry, ...] | list[StreamEntry], now: float) -> None:
        """Write the frames of ``entries`` that are new to this client, in one write."""
        if self.ended.done():
            return
        frames: list[bytes] = []
        newest: StreamEntry | None = None
        terminal = False
        wanted = self.follow.request_id
        for entry in entries:
            if entry.position <= self.last:
                continue  # the backlog already had it
            self.last = entry.position
            if wanted and entry.request_id != wanted:
                continue  # another turn of the session
            self.position, self.turn = entry.entry_id, entry.request_id
            if entry.type in _PROMPT_TYPES:
                self._note_prompt(entry)
            encoded = frame(entry, self.follow.fmt)
            if encoded is not None:
                frames.append(encoded)
                newest = entry
            if entry.type == TERMINAL:
                terminal = True
                break
        if frames:
            self.write(frames[0] if len(frames) == 1 else b"".join(frames), now)
            sent(newest.epoch if newest is not None else None)  # the newest one's latency
        if terminal:
            self.end(End.COMPLETE)

    def _note_prompt(self, entry: StreamEntry) -> None:
        prompt_id = json.loads(entry.event_json).get("data", {}).get("prompt_id")
        if entry.type == "tool_approval_required":
            self.asking.add(prompt_id)
        else:
            self.asking.discard(prompt_id)

    def tick(self, now: float, shutdown: bool) -> None:
        """The shared timer: shutdown, idle end or heartbeat."""
        if self.ended.done():
            return
        if shutdown:
            self.end(End.SHUTDOWN)
        elif now - self.since >= self.follow.idle_timeout_s and not self.asking:
            self.end(End.IDLE)
        elif self.pending is None:
            beat = self.follow.heartbeat_s
            if beat is not None and now - self.last_sent >= beat:
                self.write(HEARTBEAT_FRAME, now)

    def write(self, data: bytes, now: float) -> None:
        self.last_sent = now
        if not self.sink.write(data):
            self.end(End.DROPPED)

    def end(self, why: End) -> None:
        if not self.ended.done():
            self.ended.set_result(why)


@dataclass(eq=False)
class _Watched:
    position: str
    subscribers: set[_Subscriber] = field(default_factory=set)


class StreamFanout:
    """Shares one ``XREAD`` loop and one timer among all the process's SSE clients."""

    def __init__(self, redis: Redis, *, block_ms: int = 200, tick_s: float = 0.25):
        self._redis = redis
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

    async def stream(self, follow: Follow, sink: Sink) -> Outcome:
        """Write ``follow``'s events to ``sink`` until its stream ends; how it ended.

        Raises :class:`RedisError` when the backlog cannot be read. Cancel it when the
        client disconnects: it unsubscribes at once."""
        key = stream_key(follow.tenant_id, follow.session_id)
        sub = _Subscriber(follow, sink, asyncio.get_running_loop().create_future())
        await self._subscribe(key, sub)
        try:
            backlog: Any = await self._redis.xrange(key, min=f"({follow.after}", count=10_000)
            entries = [stream_entry(eid.decode(), fields) for eid, fields in backlog]
            entries.extend(sub.pending or ())
            sub.pending = None  # live from here: nothing can come in between (one thread)
            sub.deliver(entries, time.monotonic())
            why = await sub.ended
            return Outcome(why, sub.position, sub.turn)
        finally:
            self._unsubscribe(key, sub)

    async def _subscribe(self, key: str, sub: _Subscriber) -> None:
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
                    entry = stream_entry(watched.position, fields)
                    for sub in watched.subscribers:  # writes only: nobody leaves meanwhile
                        sub.offer(entry, now)
            if now >= self._next_tick:
                self._next_tick = now + self._tick_s
                shutdown = AppStatus.should_exit
                for watched in self._watched.values():
                    for sub in watched.subscribers:
                        sub.tick(now, shutdown)

    async def aclose(self) -> None:
        """Stop the reader task."""
        self._watched.clear()
        if self._task is not None:
            self._task.cancel()
