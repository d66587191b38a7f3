"""Per-session Redis Streams: the projector writes them, SSE readers follow them.

Stream ``weft:stream:{tenant}:{session}`` holds each agent event once, in ``seq`` order
per turn (invariant 1): the projector's script drops any event whose ``seq`` is not above
the last one written for its turn, which removes Kafka redeliveries. The entry id is the
SSE ``id``, a stable position any gateway replica can resume from.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import NoScriptError

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
_TURN_SCAN_PAGE = 100
_TURN_SCAN_PAGES = 20


def stream_key(tenant_id: str, session_id: str) -> str:
    """Redis key of a session's event stream; the tenant is part of it (invariant 5)."""
    return f"weft:stream:{tenant_id}:{session_id}"


@dataclass(frozen=True, kw_only=True)
class StreamEntry:
    """One event as stored: its stream position, type, turn and JSON.

    The fan-out shares one instance among every client of the session, so what is
    derived from it (the comparable position, the encoded SSE frame of each format) is
    computed once per event, not once per client."""

    entry_id: str
    type: str
    request_id: str
    event_json: str
    position: tuple[int, int] = field(init=False, compare=False, repr=False)
    frames: dict[str, bytes | None] = field(
        init=False, compare=False, repr=False, default_factory=dict
    )
    """Encoded SSE frames by format (None: the format has no counterpart), filled lazily."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "position", parse_position(self.entry_id))


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
        written = await self._append(keys=[key, key + ":seq"], args=self._args(event))
        return bool(written)

    async def append_many(self, events: Sequence[Any]) -> list[bool]:
        """Write ``events`` in order in one round trip (a non-transactional pipeline of the
        same de-duplicating script), so each session's events keep their order; one flag
        per event, True when written, False for a (turn, seq) already there."""
        if len(events) <= 1:
            return [await self.append(event) for event in events]
        try:
            return await self._append_pipelined(events)
        except NoScriptError:  # Redis restarted or flushed its scripts: load it, go again
            await self._redis.script_load(_APPEND)
            return await self._append_pipelined(events)  # the script skips what is there

    async def _append_pipelined(self, events: Sequence[Any]) -> list[bool]:
        # EVALSHA itself, not the registered script on the pipeline: redis-py then sends
        # SCRIPT EXISTS before every pipeline, a second round trip per batch.
        async with self._redis.pipeline(transaction=False) as pipe:
            for event in events:
                key = stream_key(event.tenant_id, event.session_id)
                pipe.evalsha(self._append.sha, 2, key, key + ":seq", *self._args(event))
            results = await pipe.execute()
        return [bool(r) for r in results]

    def _args(self, event: Any) -> list[Any]:
        return [
            event.request_id,
            event.seq,
            event.type,
            event.model_dump_json(),
            self._max_len,
            self._retention,
        ]

    async def last_position(self, tenant_id: str, session_id: str) -> str:
        """The id of the newest entry, or ``0-0`` for an empty stream."""
        newest: Any = await self._redis.xrevrange(stream_key(tenant_id, session_id), count=1)
        return newest[0][0].decode() if newest else "0-0"

    async def exists(self, tenant_id: str, session_id: str) -> bool:
        """Whether the session has a stream within retention."""
        return bool(await self._redis.exists(stream_key(tenant_id, session_id)))

    async def latest_turn_start(self, tenant_id: str, session_id: str) -> str | None:
        """Position just before the newest turn's first event, to replay it whole.

        Reads backwards in small pages: the newest ``turn_started`` is usually close to
        the end, and thousands of reconnecting clients must not each fetch a big range."""
        key = stream_key(tenant_id, session_id)
        upper, oldest = "+", None
        for _ in range(_TURN_SCAN_PAGES):
            entries: Any = await self._redis.xrevrange(key, max=upper, count=_TURN_SCAN_PAGE)
            for entry_id, fields in entries:
                if fields.get(b"type") == b"turn_started":
                    return _before(entry_id.decode())
            if len(entries) < _TURN_SCAN_PAGE:
                return _before(entries[-1][0].decode()) if entries else oldest
            oldest = _before(entries[-1][0].decode())
            upper = f"({entries[-1][0].decode()}"
        return oldest


def stream_entry(entry_id: str, fields: Any) -> StreamEntry:
    """A stored entry from its Redis id and fields."""
    return StreamEntry(
        entry_id=entry_id,
        type=fields[b"type"].decode(),
        request_id=fields[b"request_id"].decode(),
        event_json=fields[b"event"].decode(),
    )


def parse_position(entry_id: str) -> tuple[int, int]:
    """A stream id ``ms-seq`` as a comparable pair."""
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


def active_turn_key(tenant_id: str, session_id: str) -> str:
    """Redis key the engine holds (= the running request id) while a turn runs."""
    return f"weft:session:{tenant_id}:{session_id}:active"


def _before(entry_id: str) -> str:
    ms, seq = (int(p) for p in entry_id.split("-"))
    return f"{ms}-{seq - 1}" if seq > 0 else f"{ms - 1}-18446744073709551615"
