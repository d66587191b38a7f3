"""TenantSlots: a per-tenant cap on work in flight across every replica of a service.

Each tenant has a sorted set in Redis whose members are the slots held now, scored by
when their lease runs out. Taking a slot first drops the expired members, then adds one
only while fewer than ``cap`` remain, in one Lua script (atomic against the other
replicas). A holder renews its slots while the work runs; a replica that is killed
stops renewing, so its slots come back after at most ``lease_s`` (invariant 5: one tenant
cannot starve the others, and a crash cannot leave a tenant capped for good). Times are
Redis's own clock, so the replicas' clocks need not agree.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from redis.asyncio import Redis

_TAKE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if not redis.call('ZSCORE', KEYS[1], ARGV[1])
    and redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then
  return 0
end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
"""

_RENEW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local kept = redis.call('ZADD', KEYS[1], 'XX', 'CH', now + tonumber(ARGV[2]), ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return kept
"""


class TenantSlots:
    """At most ``cap`` slots per tenant at once, across processes (leases in Redis)."""

    def __init__(self, redis: Redis, name: str, *, cap: int, lease_s: float):
        """``name``: whose slots (a service and its work, with the deployment's prefix)."""
        if cap < 1:
            raise ValueError("cap must be at least 1")
        self._redis = redis
        self._name = name
        self.cap = cap
        self.lease_s = lease_s
        self._lease_ms = max(1, int(lease_s * 1000))
        self._take: Any = redis.register_script(_TAKE)
        self._renew: Any = redis.register_script(_RENEW)

    def key(self, tenant_id: str) -> str:
        """The Redis key of the tenant's slots."""
        return f"weft:slots:{self._name}:{tenant_id}"

    async def acquire(self, tenant_id: str, holder: str) -> bool:
        """Take a slot for ``holder`` (unique per piece of work); False at the cap. A holder
        that holds its slot already keeps it (its lease starts over)."""
        key = self.key(tenant_id)
        taken = await self._take(keys=[key], args=[holder, self.cap, self._lease_ms])
        return bool(taken)

    async def renew(self, held: Iterable[tuple[str, str]]) -> None:
        """Push back the lease of each ``(tenant_id, holder)`` still held."""
        for tenant_id, holder in held:
            await self._renew(keys=[self.key(tenant_id)], args=[holder, self._lease_ms])

    async def release(self, tenant_id: str, holder: str) -> None:
        """Give the slot back."""
        await self._redis.zrem(self.key(tenant_id), holder)

    async def held(self, tenant_id: str) -> int:
        """Slots the tenant holds now (expired ones included until the next take)."""
        return int(await self._redis.zcard(self.key(tenant_id)))
