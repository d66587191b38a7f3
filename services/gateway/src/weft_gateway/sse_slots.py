"""StreamSlots: a cap on a tenant's open SSE connections, across gateway replicas.

Each open stream holds a lease in the tenant's Redis sorted set (member: a connection id,
score: the lease's expiry). Opening one removes the expired leases and adds its own only
while the set is below the cap, in one Lua script, so two replicas cannot both take the
last slot. The replica renews the leases of its open streams every third of the lease
time; a stream's end removes its lease. A killed gateway renews nothing, so its streams'
slots come back within ``lease_s`` (invariant 6: bounded, and nothing held forever).
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from dataclasses import dataclass

import structlog
from fastapi import HTTPException
from redis.asyncio import Redis
from redis.exceptions import RedisError

log = structlog.get_logger(__name__)

_TAKE = """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then
  return redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')[2]
end
redis.call('ZADD', KEYS[1], ARGV[3], ARGV[4])
redis.call('PEXPIRE', KEYS[1], ARGV[5])
return 0
"""
"""0: taken; else the earliest expiry among the held leases (when a slot frees at the
latest, should no stream close before)."""


def slots_key(tenant_id: str) -> str:
    """Sorted set of a tenant's open SSE connections."""
    return f"weft:tenant:{tenant_id}:sse"


@dataclass(frozen=True)
class StreamSlot:
    """One open stream's lease."""

    tenant_id: str
    connection_id: str


class StreamSlots:
    """Per-tenant SSE connection leases; one renewal task per process."""

    def __init__(self, redis: Redis, *, max_per_tenant: int, lease_s: float):
        self._redis = redis
        self._max = max_per_tenant
        self._lease_s = lease_s
        self._take = redis.register_script(_TAKE)
        self._open: set[StreamSlot] = set()
        self._renewer: asyncio.Task[None] | None = None

    async def acquire(self, tenant_id: str) -> StreamSlot | None:
        """A slot for a new stream, None when there is no cap; 429 with the reason when
        the tenant holds its maximum."""
        if self._max <= 0:
            return None
        slot = StreamSlot(tenant_id, secrets.token_hex(8))
        now = time.time()
        taken = await self._take(
            keys=[slots_key(tenant_id)],
            args=[now, self._max, now + self._lease_s, slot.connection_id,
                  int(self._lease_s * 2000)],
        )  # fmt: skip
        if taken != 0:
            retry = max(1, int(float(taken) - now + 0.999))
            detail = {
                "code": "too_many_streams",
                "limit": self._max,
                "message": f"this tenant already has {self._max} open event streams; "
                "close one (or wait for one to end) and try again",
            }
            raise HTTPException(429, detail, {"Retry-After": str(min(retry, 60))})
        self._open.add(slot)
        self._ensure_renewer()
        return slot

    async def release(self, slot: StreamSlot | None) -> None:
        """Give a stream's slot back (its lease expires anyway if this fails)."""
        if slot is None or slot not in self._open:
            return
        self._open.discard(slot)
        try:
            await self._redis.zrem(slots_key(slot.tenant_id), slot.connection_id)
        except RedisError as exc:
            log.warning("sse_slot_release_failed", tenant_id=slot.tenant_id, error=repr(exc))

    async def aclose(self) -> None:
        """Stop renewing and release every slot of this process (shutdown)."""
        if self._renewer is not None:
            self._renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._renewer
        for slot in list(self._open):
            await self.release(slot)

    def _ensure_renewer(self) -> None:
        if self._renewer is None or self._renewer.done():
            self._renewer = asyncio.create_task(self._renew_forever())

    async def _renew_forever(self) -> None:
        while self._open:
            await asyncio.sleep(self._lease_s / 3)
            try:
                await self._renew()
            except RedisError as exc:  # the next period tries again; leases last 3 periods
                log.warning("sse_slot_renew_failed", error=repr(exc))

    async def _renew(self) -> None:
        expiry = time.time() + self._lease_s
        async with self._redis.pipeline(transaction=False) as pipe:
            for slot in list(self._open):
                # XX: only a lease still held. One that expired (renewals failed for a
                # whole lease) is not added back past the cap: its stream goes on
                # uncounted until it ends.
                pipe.zadd(slots_key(slot.tenant_id), {slot.connection_id: expiry}, xx=True)
                pipe.pexpire(slots_key(slot.tenant_id), int(self._lease_s * 2000))
            await pipe.execute()
