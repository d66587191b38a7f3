"""SessionDirectory: who owns a session, answered from Redis before asking memory.

Every chat, stop and steer request needs the same few facts about its session: that it
exists, that it is the caller's tenant's, and its agent. Asking memory for them on every
message made chat depend on a busy memory service (503s under load), so the facts are
kept in Redis, shared by every gateway replica:

* filled when a session is created, read (GET) or looked up on a miss; a fill never
  overwrites an entry (``SET NX``), so a lookup that raced with an update or a delete
  cannot bring stale facts back;
* replaced by the new facts when a session is updated through any gateway replica;
* replaced by a tombstone when a session is deleted through any gateway replica: the next
  chat is 404 at once, without asking memory;
* forgotten after ``ttl_s`` in any case. That is the bound for changes that bypass the
  gateway (memory's internal API): such a deleted session stays chat-able at most
  ``ttl_s`` seconds.

The key holds the tenant (invariant 5): another tenant's lookup of the same id misses the
entry and gets memory's 404. The entry holds the owner: another user of the same tenant
gets the same 404 from a hit as from memory. When Redis fails, lookups go to memory, as
before.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

import structlog
from fastapi import HTTPException
from redis.asyncio import Redis
from redis.exceptions import RedisError

from weft_gateway.clients import SessionsClient

log = structlog.get_logger(__name__)

TOMBSTONE = b"deleted"


def session_key(tenant_id: str, session_id: str) -> str:
    """Redis key of one session's ownership facts."""
    return f"weft:gw:session:{tenant_id}:{session_id}"


@dataclass(frozen=True)
class SessionFacts:
    """What the chat routes need to know about a session."""

    tenant_id: str
    user_id: str
    agent_id: str | None

    @classmethod
    def of(cls, session: dict[str, Any]) -> SessionFacts:
        """The facts of a session as memory returns it."""
        return cls(session["tenant_id"], session["user_id"], session.get("agent_id"))


def not_found(session_id: str) -> HTTPException:
    """The 404 memory gives for a missing (or another tenant's or user's) session."""
    return HTTPException(404, f"session {session_id!r} not found")


class SessionDirectory:
    """Session ownership facts: Redis first, memory on a miss."""

    def __init__(
        self, redis: Redis, memory: SessionsClient, *, ttl_s: int, lookup_timeout_s: float
    ):
        self._redis = redis
        self._memory = memory
        self._ttl_s = ttl_s
        self._lookup_timeout_s = lookup_timeout_s

    async def lookup(self, tenant_id: str, session_id: str, *, user_id: str) -> SessionFacts:
        """The facts of the caller's session; 404 when it does not exist for this tenant,
        belongs to another user of the tenant, or was deleted through a gateway; 503 with
        Retry-After when memory must be asked and does not answer within
        ``lookup_timeout_s``."""
        facts = await self._facts(tenant_id, session_id, user_id)
        # A cached entry is shared by every user of the tenant: the owner is checked on
        # every lookup, hit or miss, never only when memory is asked.
        if facts.user_id != user_id:
            raise not_found(session_id)
        return facts

    async def _facts(self, tenant_id: str, session_id: str, user_id: str) -> SessionFacts:
        key = session_key(tenant_id, session_id)
        cached = await self._get(key)
        if cached == TOMBSTONE:
            raise not_found(session_id)
        if cached is not None:
            return SessionFacts(**json.loads(cached))
        session = await self._memory.get_session(
            tenant_id, user_id, session_id, timeout_s=self._lookup_timeout_s
        )
        facts = SessionFacts.of(session)
        await self._set(key, facts, only_if_absent=True)
        return facts

    async def remember(self, session: dict[str, Any]) -> None:
        """Store the facts of a session memory just returned (create or get): only if no
        entry exists, so a concurrent update's or delete's entry is kept."""
        facts = SessionFacts.of(session)
        await self._set(session_key(facts.tenant_id, session["id"]), facts, only_if_absent=True)

    async def updated(self, session: dict[str, Any]) -> None:
        """Replace the facts after an update (memory's answer is the new state)."""
        facts = SessionFacts.of(session)
        await self._set(session_key(facts.tenant_id, session["id"]), facts, only_if_absent=False)

    async def deleted(self, tenant_id: str, session_id: str) -> None:
        """Mark a deleted session: chat on it is 404 on every replica from now on."""
        try:
            await self._redis.set(session_key(tenant_id, session_id), TOMBSTONE, ex=self._ttl_s)
        except RedisError:
            # Memory already deleted it; the stale entry (if any) ends with its TTL.
            log.warning("session_cache_unavailable", op="delete", session_id=session_id)

    async def _get(self, key: str) -> bytes | None:
        try:
            value: bytes | str | None = await self._redis.get(key)
        except RedisError:
            log.warning("session_cache_unavailable", op="get", key=key)
            return None
        return value.encode() if isinstance(value, str) else value

    async def _set(self, key: str, facts: SessionFacts, *, only_if_absent: bool) -> None:
        try:
            await self._redis.set(key, json.dumps(asdict(facts)), ex=self._ttl_s, nx=only_if_absent)
        except RedisError:
            log.warning("session_cache_unavailable", op="set", key=key)
