"""SessionGate: at most one running turn per session, and the queue of waiting ones.

``weft:session:{tenant}:{session}:active`` holds the running request id (the gateway
reads it to reject double-texting); enqueued requests wait in a Redis list, in order, and
``...:last`` names the session's last ended turn, whose end the next turn's history must
hold (memory waits for it, SPEC E-01 and M-08).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis
from weft_contracts import ChatRequested

from weft_engine.keys import inbox_key

# KEYS: active, last. ARGV: request id, ttl. {holder, ''} when another turn runs, else
# {'', last ended turn or ''} with the session claimed (again, for a redelivery).
_CLAIM = """
local holder = redis.call('GET', KEYS[1])
if holder and holder ~= ARGV[1] then return {holder, ''} end
redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2])
return {'', redis.call('GET', KEYS[2]) or ''}
"""

# KEYS: active, queue, last. ARGV: ended request id, ttl. Unless another turn holds the
# session, the ended turn becomes its last one and the oldest queued request (returned)
# its running turn, in one step: no third message can slip in between.
_HAND_OVER = """
local holder = redis.call('GET', KEYS[1])
if holder and holder ~= ARGV[1] then return false end
redis.call('SET', KEYS[3], ARGV[1], 'EX', ARGV[2])
local queued = redis.call('LPOP', KEYS[2])
if not queued then
  redis.call('DEL', KEYS[1])
  return false
end
redis.call('SET', KEYS[1], cjson.decode(queued)['request_id'], 'EX', ARGV[2])
return queued
"""


def active_key(tenant_id: str, session_id: str) -> str:
    """Redis key of a session's running turn."""
    return f"weft:session:{tenant_id}:{session_id}:active"


@dataclass(frozen=True)
class SessionClaim:
    """What claiming a session for a turn found."""

    holder: str | None
    """The running turn that keeps the session busy; None: the session is the turn's."""
    previous: str | None
    """The session's last ended turn (when claimed), for the history to wait for."""


class SessionGate:
    """Claims sessions for turns and keeps their queues."""

    def __init__(self, redis: Redis, ttl_s: int):
        self._redis = redis
        self._ttl = ttl_s
        self._claim = redis.register_script(_CLAIM)
        self._hand_over = redis.register_script(_HAND_OVER)

    @staticmethod
    def _keys(tenant_id: str, session_id: str) -> tuple[str, str, str]:
        active = active_key(tenant_id, session_id)
        return active, active + ":queue", active.removesuffix(":active") + ":last"

    async def claim(self, tenant_id: str, session_id: str, request_id: str) -> SessionClaim:
        """Make ``request_id`` the session's running turn unless another one runs."""
        active, _, last = self._keys(tenant_id, session_id)
        holder, previous = await self._claim(keys=[active, last], args=[request_id, self._ttl])
        if holder:
            return SessionClaim(holder=holder.decode(), previous=None)
        return SessionClaim(holder=None, previous=previous.decode() or None)

    async def active(self, tenant_id: str, session_id: str) -> str | None:
        """The running turn of the session, if any."""
        holder: Any = await self._redis.get(active_key(tenant_id, session_id))
        return holder.decode() if holder else None

    async def hand_over(self, tenant_id: str, session_id: str, ended: str) -> ChatRequested | None:
        """The turn ``ended`` frees the session: the oldest queued request, now running in
        it, or None (the session is free). Nothing changes if another turn holds it."""
        raw: Any = await self._hand_over(
            keys=list(self._keys(tenant_id, session_id)), args=[ended, self._ttl]
        )
        # As TurnStore.load: a later engine's fields are ignored (weft_contracts.compat).
        return ChatRequested.model_validate_json(raw, extra="ignore") if raw else None

    async def enqueue(self, request: ChatRequested) -> None:
        """Keep ``request`` until the running turn ends (double-texting "enqueue")."""
        key = self._keys(request.tenant_id, request.session_id)[1]
        await self._redis.rpush(key, request.model_dump_json())
        await self._redis.expire(key, self._ttl)


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
