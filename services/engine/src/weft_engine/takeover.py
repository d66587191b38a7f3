"""What a replica reads when it takes a turn over from one that stopped (invariant 2).

One round trip, at the start of the takeover's step: the attempt count (bounded by
``MAX_TAKEOVERS``), the round whose text was half-streamed (that round runs again after
a superseded marker, ``TurnLoop._take_over``), whether the turn's ``complete`` was sent
already (then only its state is left to forget), and how far Kafka acknowledged the
turn's dispatched calls (``ToolRound.recover``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis

from weft_engine.keys import acked_key, completed_key, streaming_key, takeovers_key
from weft_engine.leases import AckedDispatch


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
