"""TurnCap: at most ``cap`` turns of one tenant open at once, across every engine replica.

A turn takes a slot of ``weft_platform.tenant_slots.TenantSlots`` (held by its request id)
before it opens, and gives it back when it ends (``Finisher.forget``, whatever the end).
Nothing renews the slot while the turn waits for its tools: its lease is the turn deadline
plus a margin, and the deadline ends the turn before that, so a slot outlives its turn only
when the replica that held it was killed, and then comes back by itself (invariant 5).

A turn over its tenant's cap is not dropped and does not hold the Kafka handler: it
becomes a pending start (``SessionGate.defer``, in Redis before the request's offset is
committed), and ``TurnIntake.retry_starts`` opens it once a slot is free (on any
replica: the one that gives a slot back says so on :attr:`TurnCap.channel`), taking due
starts round-robin by tenant so one tenant's backlog does not go first.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import TypeVar

import structlog
from redis.asyncio import Redis
from redis.exceptions import RedisError
from weft_platform.tenant_slots import TenantSlots

log = structlog.get_logger(__name__)

SLOT_MARGIN_S = 60.0
"""A turn slot's lease beyond the turn deadline (the deadline's own check runs between
rounds and after the tool deadline, so a turn can end a little past it)."""
DEFER_S = 1.0
"""How soon a start deferred by the cap is due again (a slot given back on any replica
wakes every replica's ``retry_starts``, through :attr:`TurnCap.channel`)."""

T = TypeVar("T")


class TurnCap:
    """The per-tenant turn cap; ``cap`` 0 turns it off (every take succeeds)."""

    def __init__(
        self,
        redis: Redis,
        name: str,
        *,
        cap: int,
        turn_deadline_s: float,
        margin_s: float = SLOT_MARGIN_S,
    ):
        self.cap = cap
        self.lease_s = turn_deadline_s + margin_s
        self._redis = redis
        self._slots = TenantSlots(redis, name, cap=cap, lease_s=self.lease_s) if cap > 0 else None
        self.channel = f"weft:{name}:freed"
        """The pub/sub channel on which a replica that gives a slot back tells the others
        (its message: the tenant); every replica's listener sets :attr:`freed`."""
        self.freed = asyncio.Event()
        """Set when any replica gives a slot back: pending starts may go now."""

    async def take(self, tenant_id: str, request_id: str) -> bool:
        """Take the turn's slot; True also when it holds it already (a retried handler)."""
        if self._slots is None:
            return True
        return await self._slots.acquire(tenant_id, request_id)

    async def release(self, tenant_id: str, request_id: str) -> None:
        """The turn ended: its slot is free (a no-op when it held none)."""
        if self._slots is None:
            return
        await self._slots.release(tenant_id, request_id)
        self.freed.set()
        try:
            await self._redis.publish(self.channel, tenant_id)
        except RedisError as exc:  # the others' sweeps still find the start in time
            log.warning("turn_slot_freed_unannounced", error=repr(exc))

    async def held(self, tenant_id: str) -> int:
        """Slots the tenant holds now."""
        return 0 if self._slots is None else await self._slots.held(tenant_id)


def round_robin(items: Iterable[T], tenant: Callable[[T], str]) -> list[T]:
    """``items`` reordered one per tenant in turn, each tenant's own in their order; tenants
    take turns in the order of their first item."""
    queues: OrderedDict[str, list[T]] = OrderedDict()
    for item in items:
        queues.setdefault(tenant(item), []).append(item)
    ordered: list[T] = []
    while queues:
        for key in list(queues):
            queue = queues[key]
            ordered.append(queue.pop(0))
            if not queue:
                del queues[key]
    return ordered
