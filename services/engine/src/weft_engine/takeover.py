"""What a replica reads when it takes a turn over from one that stopped (invariant 2).

One round trip, at the start of the takeover's step: the attempt count (bounded by
``MAX_TAKEOVERS``), the round whose text was half-streamed (that round runs again after
a superseded marker, ``TurnLoop._take_over``), whether the turn's ``complete`` was sent
already (then only its state is left to forget), and how far Kafka acknowledged the
turn's dispatched calls (``ToolRound.recover``). Every takeover also counts the turn's
events on from the last one Kafka holds (:func:`catch_up`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import structlog
from aiokafka.errors import KafkaError
from redis.asyncio import Redis

from weft_engine.emitter import EventEmitter
from weft_engine.keys import acked_key, completed_key, streaming_key, takeovers_key
from weft_engine.leases import AckedDispatch
from weft_engine.state import TurnState
from weft_engine.trails import TurnTrails

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class TakeoverRead:
    """The turn as the replica that stopped left it, beyond its stored state."""

    attempt: int
    """How many takeovers of the turn there were, this one included."""
    streamed_round: int | None
    """The round whose text was half-streamed, if any."""
    completed: bool
    """The turn's ``complete`` is out (SPEC E-04)."""
    acked: AckedDispatch | None
    """How far Kafka acknowledged the dispatched calls, when a step recorded it."""


async def read_takeover(redis: Redis, request_id: str) -> TakeoverRead:
    """Count this takeover and read what it needs, in one round trip."""
    pipe: Any = redis.pipeline(transaction=False)
    pipe.incr(takeovers_key(request_id))
    pipe.get(streaming_key(request_id))
    pipe.exists(completed_key(request_id))
    pipe.get(acked_key(request_id))
    attempt, streamed, completed, acked = await pipe.execute()
    return TakeoverRead(
        attempt=int(attempt),
        streamed_round=None if streamed is None else int(streamed),
        completed=bool(completed),
        acked=AckedDispatch.decode(acked),
    )


@dataclass(frozen=True)
class _TurnRef:
    session_id: str
    request_id: str
    started_at: datetime


async def catch_up(trails: TurnTrails, emitter: EventEmitter, state: TurnState) -> None:
    """Count the turn's events on from the last one in Kafka: the stopped replica may have
    reserved seqs (a delta, a thought, an ``error``) that it never published, and clients
    would see the gap. Events a dead replica left in the turn's outbox (a recorded
    result's, its tool calls', its ``complete``) are published first, at their seqs: their
    seqs are not given back (``outbox``). The turn is held while its trail is read
    (``EventEmitter.catch_up``), so a result recorded meanwhile on any replica waits
    instead of reserving a seq the recount would hand out again; the takeover's step
    holds the lease, so no other step reserves any. A trail that cannot be read leaves
    the counter as it is: a gap is better than a seq handed out twice."""
    started = datetime.fromtimestamp(state.started_at, UTC)

    async def last_published() -> int | None:
        try:
            found = await trails.read([_TurnRef(state.session_id, state.request_id, started)])
        except (TimeoutError, KafkaError, OSError) as exc:
            log.warning("takeover_trail_unread", request_id=state.request_id, error=repr(exc))
            return None
        trail = found.get(state.request_id)
        if trail is None or trail.last_seq == 0:  # not even turn_started: not this topic's
            return None
        return trail.last_seq

    given_back = await emitter.catch_up(state.request_id, last_published)
    log.info("takeover_caught_up", request_id=state.request_id, given_back=given_back)
