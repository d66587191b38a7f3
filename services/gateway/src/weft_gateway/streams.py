"""Per-session Redis Streams: the projector writes them, SSE readers follow them.

Stream ``weft:stream:{tenant}:{session}`` holds each agent event once, in ``seq`` order
per turn (invariant 1): the projector's script drops any event whose ``seq`` is not above
the last one written for its turn, which removes Kafka redeliveries. The entry id is the
SSE ``id``, a stable position any gateway replica can resume from.

An entry's id comes from the log: ``{offset + 1}-0``, the event's offset in its
``agent.events`` partition (a session's events are all on one partition), so writing the
log again after Redis lost the streams gives every event the id it had, and a client's
``Last-Event-ID`` (or the fan-out's read position) still means the same place. An id at
or below the stream's newest (a stream from before this scheme, or a topic whose
partitions changed) becomes the newest's successor instead: order holds, only a rebuild
could then give different ids.

The turn hash also keeps ``done:<request id>`` once a turn's ``complete`` is written: a
session notice about that turn waits for it (``notices``).

Redis coming back empty is noticed by the projector, per partition: its appends are
guarded by a mark (``marks_key``, one field per partition) that an empty Redis does not
have. An append of a partition without its mark writes nothing and says so; the projector
then writes the partition's recent log again (unguarded), sets the mark, and goes on
(``StreamProjector``).

**No credential is stored.** Records on ``agent.events`` carry the turn's credential (a
signed token other services accept); a stream is what clients read, so every entry is
written without it (:func:`client_json`) and read without it (:func:`stream_entry`, which
also cleans entries an older gateway wrote with it).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from functools import cached_property
from typing import Any

from pydantic import BaseModel
from redis.asyncio import Redis
from redis.exceptions import NoScriptError
from weft_platform.bus import Logged

from weft_gateway.sse_metrics import event_epoch

# KEYS: stream, its turns' last seqs, the partition marks. ARGV: request id, seq, type,
# event JSON, max length, retention, offset + 1, partition, guarded ('1' or '0').
_APPEND = """
if ARGV[9] == '1' and redis.call('HEXISTS', KEYS[3], ARGV[8]) == 0 then return -1 end
local last = tonumber(redis.call('HGET', KEYS[2], ARGV[1]) or '0')
if tonumber(ARGV[2]) <= last then return 0 end
local id = ARGV[7] .. '-0'
local newest = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)[1]
if newest then
  local ms, n = string.match(newest[1], '^(%d+)-(%d+)$')
  if tonumber(ARGV[7]) <= tonumber(ms) then id = ms .. '-' .. string.format('%d', n + 1) end
end
redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[5], id,
           'request_id', ARGV[1], 'seq', ARGV[2], 'type', ARGV[3], 'event', ARGV[4])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
if ARGV[3] == 'complete' then redis.call('HSET', KEYS[2], 'done:' .. ARGV[1], id) end
redis.call('EXPIRE', KEYS[1], ARGV[6])
redis.call('EXPIRE', KEYS[2], ARGV[6])
return 1
"""

TERMINAL = "complete"
_TURN_SCAN_PAGE = 100
_TURN_SCAN_PAGES = 20


class Appended(IntEnum):
    """What an append did with one event."""

    UNMARKED = -1
    """Nothing: its partition has no mark (Redis lost the streams)."""
    KNOWN = 0
    """Nothing: its turn has this ``seq`` already (a redelivery)."""
    WRITTEN = 1


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

    @cached_property
    def epoch(self) -> float | None:
        """The event's ``time`` as epoch seconds (SSE send latency), read once."""
        return event_epoch(self.event_json)


class SessionStreams:
    """Append and follow session streams."""

    def __init__(self, redis: Redis, *, max_len: int, retention_s: int, marks_key: str):
        self._redis = redis
        self._max_len = max_len
        self._retention = retention_s
        self._marks_key = marks_key
        self._append = redis.register_script(_APPEND)

    async def append_many(
        self, records: Sequence[Logged], *, guarded: bool = True
    ) -> list[Appended]:
        """Write ``records`` (agent events with their log positions) in order in one round
        trip: a non-transactional pipeline of the de-duplicating script, so each session's
        events keep their order. ``guarded``: a record of a partition without its mark is
        not written (:attr:`Appended.UNMARKED`)."""
        if not records:
            return []
        try:
            return await self._append_pipelined(records, guarded)
        except NoScriptError:  # Redis restarted or flushed its scripts: load it, go again
            await self._redis.script_load(_APPEND)
            return await self._append_pipelined(records, guarded)  # the script skips dupes

    async def _append_pipelined(self, records: Sequence[Logged], guarded: bool) -> list[Appended]:
        # EVALSHA itself, not the registered script on the pipeline: redis-py then sends
        # SCRIPT EXISTS before every pipeline, a second round trip per batch.
        async with self._redis.pipeline(transaction=False) as pipe:
            for record in records:
                event = record.event
                key = stream_key(event.tenant_id, event.session_id)
                pipe.evalsha(
                    self._append.sha, 3, key, key + ":seq", self._marks_key,
                    event.request_id, event.seq, event.type, client_json(event),
                    self._max_len, self._retention, record.offset + 1, record.partition,
                    "1" if guarded else "0",
                )  # fmt: skip
            results = await pipe.execute()
        return [Appended(int(r)) for r in results]

    async def mark(self, offsets: dict[int, int]) -> None:
        """Set the marks of these partitions (to the offset they were written up to): their
        streams are whole again."""
        await self._redis.hset(self._marks_key, mapping={str(p): o for p, o in offsets.items()})

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


PRIVATE_FIELDS = frozenset({"credential"})
"""Envelope fields that never reach a client: the credential opens internal routes."""
_PRIVATE_MARKS = tuple(f'"{name}"'.encode() for name in PRIVATE_FIELDS)


def client_json(envelope: BaseModel) -> str:
    """``envelope`` as a client may read it: without its credential."""
    return envelope.model_dump_json(exclude=set(PRIVATE_FIELDS))


def stream_entry(entry_id: str, fields: Any) -> StreamEntry:
    """A stored entry from its Redis id and fields, never with a credential (an entry
    written before streams were stored without one is cleaned here, the one place every
    entry passes on its way to a client)."""
    raw: bytes = fields[b"event"]
    if any(mark in raw for mark in _PRIVATE_MARKS):
        envelope = json.loads(raw)
        if isinstance(envelope, dict) and PRIVATE_FIELDS & envelope.keys():
            for name in PRIVATE_FIELDS:
                envelope.pop(name, None)
            raw = json.dumps(envelope, ensure_ascii=False, separators=(",", ":")).encode()
    return StreamEntry(
        entry_id=entry_id,
        type=fields[b"type"].decode(),
        request_id=fields[b"request_id"].decode(),
        event_json=raw.decode(),
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
