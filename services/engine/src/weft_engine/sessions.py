"""SessionGate: at most one running turn per session, and the queue of waiting ones.

``weft:session:{tenant}:{session}:active`` holds the running request id (the gateway
reads it to reject double-texting); enqueued requests wait in a Redis list, in order.
"""

from __future__ import annotations

from typing import Any

from redis.asyncio import Redis
from weft_contracts import ChatRequested

from weft_engine.keys import inbox_key

_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


def active_key(tenant_id: str, session_id: str) -> str:
    """Redis key of a session's running turn."""
    return f"weft:session:{tenant_id}:{session_id}:active"


class SessionGate:
    """Claims sessions for turns and keeps their queues."""

    def __init__(self, redis: Redis, ttl_s: int):
        self._redis = redis
        self._ttl = ttl_s
        self._release = redis.register_script(_RELEASE)

    async def claim(self, tenant_id: str, session_id: str, request_id: str) -> str | None:
        """Make ``request_id`` the session's running turn; return the holder when busy."""
        key = active_key(tenant_id, session_id)
        if await self._redis.set(key, request_id, nx=True, ex=self._ttl):
            return None
        holder: Any = await self._redis.get(key)
        holder_id = holder.decode() if holder else None
        return None if holder_id == request_id else holder_id

    async def active(self, tenant_id: str, session_id: str) -> str | None:
        """The running turn of the session, if any."""
        holder: Any = await self._redis.get(active_key(tenant_id, session_id))
        return holder.decode() if holder else None

    async def release(self, tenant_id: str, session_id: str, request_id: str) -> None:
        """Free the session if ``request_id`` holds it."""
        await self._release(keys=[active_key(tenant_id, session_id)], args=[request_id])

    async def enqueue(self, request: ChatRequested) -> None:
        """Keep ``request`` until the running turn ends (double-texting "enqueue")."""
        key = active_key(request.tenant_id, request.session_id) + ":queue"
        await self._redis.rpush(key, request.model_dump_json())
        await self._redis.expire(key, self._ttl)

    async def next_queued(self, tenant_id: str, session_id: str) -> ChatRequested | None:
        """The oldest waiting request of the session, removed from the queue."""
        raw: Any = await self._redis.lpop(active_key(tenant_id, session_id) + ":queue")
        return ChatRequested.model_validate_json(raw) if raw else None


POLL_BATCH = 100
"""Steer messages taken by one think at most."""


class SteerInbox:
    """Messages injected into a running turn (SPEC E-13)."""

    def __init__(self, redis: Redis, ttl_s: int):
        self._redis = redis
        self._ttl = ttl_s

    @staticmethod
    def key(request_id: str) -> str:
        """Redis list of the turn's waiting steer messages."""
        return inbox_key(request_id)

    async def put(self, request_id: str, content: str) -> None:
        """Add a message for the turn's next think."""
        await self._redis.rpush(self.key(request_id), content)
        await self._redis.expire(self.key(request_id), self._ttl)

    async def waiting(self, request_id: str) -> bool:
        """Whether a message waits."""
        return bool(await self._redis.llen(self.key(request_id)))

    async def poll(self, request_id: str, cancel_key: str) -> tuple[bool, list[str]]:
        """In one round trip: whether the turn was stopped, and the waiting messages (up to
        ``POLL_BATCH``; more wait for the next think). ``LPOP`` with a count takes them
        atomically, so no transaction is needed (two commands instead of five)."""
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.exists(cancel_key)
            pipe.lpop(self.key(request_id), POLL_BATCH)
            stopped, raw = await pipe.execute()
        return bool(stopped), [m.decode() for m in raw or []]
