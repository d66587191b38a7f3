"""Per-tenant limits kept in Redis, so every gateway replica counts together (invariant 6).

* Request rate: a fixed one-minute window counter per tenant; over the limit -> 429 with
  ``Retry-After`` = seconds left in the window.
* Concurrent turns: a sorted set of the tenant's running request ids scored by start time;
  the projector removes a turn when its ``complete`` passes, and entries older than
  ``turn_ttl_s`` are forgotten so a lost ``complete`` cannot block a tenant forever.
* Request bodies: larger than ``max_body_bytes`` -> 413 before the body is read.
"""

from __future__ import annotations

import time

from fastapi import HTTPException
from redis.asyncio import Redis

_ADMIT_TURN = """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then return 0 end
redis.call('ZADD', KEYS[1], ARGV[3], ARGV[4])
redis.call('EXPIRE', KEYS[1], ARGV[5])
return 1
"""


def turns_key(tenant_id: str) -> str:
    """Sorted set of a tenant's running turns."""
    return f"weft:tenant:{tenant_id}:turns"


class TenantLimits:
    """Rate and concurrency admission for one tenant at a time."""

    def __init__(
        self, redis: Redis, *, requests_per_minute: int, concurrent_turns: int, turn_ttl_s: int
    ):
        self._redis = redis
        self._rpm = requests_per_minute
        self._turns = concurrent_turns
        self._turn_ttl = turn_ttl_s
        self._admit = redis.register_script(_ADMIT_TURN)

    async def check_rate(self, tenant_id: str) -> None:
        """Count one request; 429 when the tenant is over its per-minute budget."""
        if self._rpm <= 0:
            return
        now = time.time()
        window = int(now // 60)
        key = f"weft:rate:{tenant_id}:{window}"
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.incr(key)
            pipe.expire(key, 120)
            count, _ = await pipe.execute()
        if int(count) > self._rpm:
            retry = max(1, int((window + 1) * 60 - now))
            raise HTTPException(
                429,
                f"rate limit of {self._rpm} requests per minute reached for this tenant",
                {"Retry-After": str(retry)},
            )

    async def admit_turn(self, tenant_id: str, request_id: str) -> None:
        """Reserve a running-turn slot; 429 when the tenant already runs its maximum."""
        now = time.time()
        admitted = await self._admit(
            keys=[turns_key(tenant_id)],
            args=[now - self._turn_ttl, self._turns, now, request_id, self._turn_ttl],
        )
        if not admitted:
            raise HTTPException(
                429,
                f"this tenant already runs {self._turns} turns; wait for one to complete",
                {"Retry-After": "5"},
            )

    async def release_turn(self, tenant_id: str, request_id: str) -> None:
        """Free the slot of a finished (or never started) turn."""
        await self._redis.zrem(turns_key(tenant_id), request_id)
