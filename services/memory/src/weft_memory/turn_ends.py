"""Read-your-writes for history: the next turn of a session sees the one before it.

The engine starts a session's next turn as soon as the previous one emits ``complete`` (a
queued message, or a client that sends at once), while memory records that ``complete``
from Kafka a moment later. Without a wait, the next turn's history can miss the previous
turn entirely (it is not completed yet in the database), against SPEC E-01 and M-08.

So the recorder signals every stored turn end in Redis (a one-element list per request,
kept ``SIGNAL_TTL_S``), and the history route, given the previous turn's request id,
answers once that end is stored: at once when the database already has it, else on the
signal (``BLMOVE`` blocks on the list without consuming it), or after the wait runs out,
with what memory has.
"""

from __future__ import annotations

from redis.asyncio import Redis
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from weft_storage.memory.models import Message

SIGNAL_TTL_S = 600
"""How long a turn end stays signalled; a history request comes within seconds."""


def turn_end_key(request_id: str) -> str:
    """Redis list that holds one element once the turn's end is stored."""
    return f"weft:memory:turn-ended:{request_id}"


async def signal_turn_end(redis: Redis, request_id: str) -> None:
    """Tell waiting history requests that the turn's end is stored (after the commit)."""
    key = turn_end_key(request_id)
    async with redis.pipeline(transaction=False) as pipe:
        pipe.lpush(key, 1)
        pipe.expire(key, SIGNAL_TTL_S)
        await pipe.execute()


async def wait_turn_end(
    sessions: async_sessionmaker[AsyncSession],
    redis: Redis | None,
    tenant_id: str,
    request_id: str,
    timeout_s: float,
) -> bool:
    """Whether the end of turn ``request_id`` is stored, waiting up to ``timeout_s``."""
    stmt = select(Message.status).where(
        Message.tenant_id == tenant_id,
        Message.request_id == request_id,
        Message.role == "assistant",
    )
    async with sessions() as s:
        status = await s.scalar(stmt)
    if status not in (None, "running"):
        return True
    if redis is None or timeout_s <= 0:
        return False
    key = turn_end_key(request_id)
    # Rotating the list onto itself waits for it without taking the element away, so
    # any number of requests can wait for the same turn. redis-py types the timeout as int,
    # but the server (6.0+) takes a decimal one, which sub-second waits need.
    moved = await redis.blmove(key, key, timeout_s, "LEFT", "LEFT")  # type: ignore[arg-type]
    return moved is not None
