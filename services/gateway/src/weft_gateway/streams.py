"""Per-session Redis Streams: the projector writes them, SSE readers follow them.

Stream ``weft:stream:{tenant}:{session}`` holds each agent event once, in ``seq`` order
per turn (invariant 1): the projector's script drops any event whose ``seq`` is not above
the last one written for its turn, which removes Kafka redeliveries. The entry id is the
SSE ``id``, a stable position any gateway replica can resume from.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis

_APPEND = """
local last = tonumber(redis.call('HGET', KEYS[2], ARGV[1]) or '0')
if tonumber(ARGV[2]) <= last then return 0 end
redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[5], '*',
           'request_id', ARGV[1], 'seq', ARGV[2], 'type', ARGV[3], 'event', ARGV[4])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
redis.call('EXPIRE', KEYS[1], ARGV[6])
redis.call('EXPIRE', KEYS[2], ARGV[6])
return 1
"""

TERMINAL = "complete"


def stream_key(tenant_id: str, session_id: str) -> str:
    """Redis key of a session's event stream; the tenant is part of it (invariant 5)."""
    return f"weft:stream:{tenant_id}:{session_id}"


@dataclass(frozen=True, kw_only=True)
class StreamEntry:
    """One event as stored: its stream position, type, turn and JSON."""

    entry_id: str
    type: str
    request_id: str
    event_json: str


class SessionStreams:
    """Append and follow session streams."""

    def __init__(self, redis: Redis, *, max_len: int, retention_s: int):
        self._redis = redis
        self._max_len = max_len
        self._retention = retention_s
        self._append = redis.register_script(_APPEND)

    async def append(self, event: Any) -> bool:
        """Write ``event`` unless its turn already has this ``seq``; True when written."""
        key = stream_key(event.tenant_id, event.session_id)
        written = await self._append(
            keys=[key, key + ":seq"],
            args=[
                event.request_id,
                event.seq,
                event.type,
                event.model_dump_json(),
                self._max_len,
                self._retention,
            ],
        )
        return bool(written)

    async def last_position(self, tenant_id: str, session_id: str) -> str:
        """The id of the newest entry, or ``0-0`` for an empty stream."""
        newest: Any = await self._redis.xrevrange(stream_key(tenant_id, session_id), count=1)
        return newest[0][0].decode() if newest else "0-0"

    async def exists(self, tenant_id: str, session_id: str) -> bool:
        """Whether the session has a stream within retention."""
        return bool(await self._redis.exists(stream_key(tenant_id, session_id)))

    async def latest_turn_start(self, tenant_id: str, session_id: str) -> str | None:
        """Position just before the newest turn's first event, to replay it whole."""
        key = stream_key(tenant_id, session_id)
        entries: Any = await self._redis.xrevrange(key, count=2000)
        for entry_id, fields in entries:
            if fields.get(b"type") == b"turn_started":
                return _before(entry_id.decode())
        return _before(entries[-1][0].decode()) if entries else None

    async def follow(
        self,
        tenant_id: str,
        session_id: str,
        after: str,
        *,
        request_id: str | None,
        idle_timeout_s: float,
    ) -> AsyncIterator[StreamEntry | None]:
        """Entries after ``after`` (of one turn when ``request_id`` is given), until that
        turn's ``complete``; yields None after ``idle_timeout_s`` without any event."""
        key = stream_key(tenant_id, session_id)
        position = after
        block_ms = int(min(idle_timeout_s, 5.0) * 1000)
        silent_ms = 0
        while True:
            batch: Any = await self._redis.xread({key: position}, block=block_ms, count=200)
            if not batch:
                silent_ms += block_ms
                if silent_ms >= idle_timeout_s * 1000:
                    yield None
                    return
                continue
            silent_ms = 0
            for entry_id, fields in batch[0][1]:
                position = entry_id.decode()
                entry = _entry(position, fields)
                if request_id and entry.request_id != request_id:
                    continue
                yield entry
                if entry.type == TERMINAL:
                    return


def _entry(entry_id: str, fields: Any) -> StreamEntry:
    return StreamEntry(
        entry_id=entry_id,
        type=fields[b"type"].decode(),
        request_id=fields[b"request_id"].decode(),
        event_json=fields[b"event"].decode(),
    )


def _before(entry_id: str) -> str:
    ms, seq = (int(p) for p in entry_id.split("-"))
    return f"{ms}-{seq - 1}" if seq > 0 else f"{ms - 1}-18446744073709551615"
