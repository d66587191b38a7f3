"""SessionGate: at most one running turn per session, and the queue of waiting ones.

``weft:session:{tenant}:{session}:active`` holds the running request id (the gateway
reads it to reject double-texting); enqueued requests wait in a Redis list, in order, and
``...:last`` names the session's last ended turn, whose end the next turn's history must
hold (memory waits for it, SPEC E-01 and M-08).

A queued request taken off its queue is not held by one replica's memory alone: the same
script that makes it the session's running turn records it as a pending start (a sorted
set by due time, ``starts_key``) until its turn is open. A start that failed (the broker
away past its window, memory down) or whose replica died stays there, and any replica's
``TurnIntake.retry_starts`` starts it once it is due (the session is claimed for it).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import RedisError
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

# KEYS: active, queue, last, pending starts. ARGV: ended request id, ttl, due time.
# Unless another turn holds the session, the ended turn becomes its last one and the
# oldest queued request its running turn, in one step (no third message can slip in
# between), and a pending start, due at ARGV[3] (returned: the entry).
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
local entry = cjson.encode({previous = ARGV[1], request = queued})
redis.call('ZADD', KEYS[4], ARGV[3], entry)
return entry
"""

# KEYS: pending starts. ARGV: now, lease (s), limit. The due entries, each pushed back by
# the lease so that no other replica takes it meanwhile.
_DUE_STARTS = """
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, ARGV[3])
for _, entry in ipairs(due) do
  redis.call('ZADD', KEYS[1], tonumber(ARGV[1]) + tonumber(ARGV[2]), entry)
end
return due
"""

START_RETRY_S = 5.0
"""How soon a pending start whose start failed is tried again."""
START_LEASE_S = 15.0
"""How long a pending start belongs to the replica starting it without a renewal: the
replica renews it every ``START_RENEW_S`` while the start runs (a start can wait out the
publish window, 60 s, and memory's retry window, 20 s), so another replica takes it over
this long after that replica stopped."""
START_RENEW_S = 5.0


def active_key(tenant_id: str, session_id: str) -> str:
    """Redis key of a session's running turn."""
    return f"weft:session:{tenant_id}:{session_id}:active"


@dataclass(frozen=True)
class HandedOver:
    """A queued request that became its session's running turn, until its turn is open."""

    request: ChatRequested
    previous: str
    """The turn that ended before it (its history must hold that one)."""
    entry: str
    """Its pending-start entry (``SessionGate.started`` removes it)."""

    @classmethod
    def decode(cls, entry: Any) -> HandedOver:
        text = entry.decode() if isinstance(entry, bytes) else str(entry)
        fields = json.loads(text)
        # As TurnStore.load: a later engine's fields are ignored (weft_contracts.compat).
        request = ChatRequested.model_validate_json(fields["request"], extra="ignore")
        return cls(request=request, previous=fields["previous"], entry=text)


@dataclass(frozen=True)
class SessionClaim:
    """What claiming a session for a turn found."""

    holder: str | None
    """The running turn that keeps the session busy; None: the session is the turn's."""
    previous: str | None
    """The session's last ended turn (when claimed), for the history to wait for."""


class SessionGate:
    """Claims sessions for turns and keeps their queues."""

    def __init__(self, redis: Redis, ttl_s: int, starts_key: str = "weft:engine:starts"):
        self._redis = redis
        self._ttl = ttl_s
        self._starts_key = starts_key
        self._claim = redis.register_script(_CLAIM)
        self._hand_over = redis.register_script(_HAND_OVER)
        self._due_starts = redis.register_script(_DUE_STARTS)

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

    async def hand_over(self, tenant_id: str, session_id: str, ended: str) -> HandedOver | None:
        """The turn ``ended`` frees the session: the oldest queued request, now running in
        it and a pending start, or None (the session is free). Nothing changes if another
        turn holds it."""
        keys = [*self._keys(tenant_id, session_id), self._starts_key]
        due = time.time() + START_LEASE_S
        raw: Any = await self._hand_over(keys=keys, args=[ended, self._ttl, due])
        return HandedOver.decode(raw) if raw else None

    async def defer(self, request: ChatRequested, previous: str | None, delay_s: float) -> None:
        """Keep ``request``, whose session is claimed for it, as a pending start due in
        ``delay_s`` (its tenant is at its turn cap, ``TurnCap``). A redelivered request
        makes the same entry, so it is kept once."""
        entry = json.dumps({"previous": previous or "", "request": request.model_dump_json()})
        await self._redis.zadd(self._starts_key, {entry: time.time() + delay_s})

    async def started(self, handed: HandedOver) -> None:
        """The handed-over request's turn is open: it is no pending start any more."""
        await self._redis.zrem(self._starts_key, handed.entry)

    async def postpone(self, handed: HandedOver, delay_s: float) -> None:
        """Try the pending start again in ``delay_s`` (its start failed)."""
        await self._redis.zadd(self._starts_key, {handed.entry: time.time() + delay_s}, xx=True)

    @contextlib.asynccontextmanager
    async def starting(self, handed: HandedOver) -> AsyncIterator[None]:
        """Hold the pending start while its turn is opened: its due time is pushed back
        every ``START_RENEW_S``, so no other replica takes it while this one lives."""

        async def renew() -> None:
            while True:
                await asyncio.sleep(START_RENEW_S)
                with contextlib.suppress(RedisError):
                    await self.postpone(handed, START_LEASE_S)

        renewal = asyncio.create_task(renew(), name="pending-start-renewal")
        try:
            yield
        finally:
            renewal.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewal

    async def due_starts(self, limit: int = 20) -> list[HandedOver]:
        """Pending starts past their due time (a failed start, a replica that died), each
        now this replica's for ``START_LEASE_S``."""
        raw: Any = await self._due_starts(
            keys=[self._starts_key], args=[time.time(), START_LEASE_S, limit]
        )
        return [HandedOver.decode(entry) for entry in raw]

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
