"""How many bytes live workspaces may hold: a tenant's across every replica, and one
replica's in all (docs/sandbox.md, "Bounded workspaces").

A replica knows its own workspaces' sizes exactly (``WorkspacePool``: measured after each
call that may change one). The other replicas' part of a tenant comes from Redis:

- ``weft:<prefix>sandboxbytes:<tenant>``: a hash, replica -> bytes of the tenant's
  workspaces held there; written by that replica after each change and on every
  heartbeat, expiring after the lease unless refreshed;
- ``weft:<prefix>sandboxreplica:<replica>``: the replica's heartbeat, expiring after the
  lease. A field whose replica has no heartbeat is ignored (and deleted), so a replica that
  died stops counting within one lease instead of holding its tenants' room forever.

When a workspace would pass a cap, the least recently used idle workspaces on this replica
(of the tenant for its cap, of any tenant for the replica's) are dropped first: an idle
copy equals its newest checkpoint, so nothing is lost and the next call restores it. What
eviction cannot free is refused (:class:`OverCap`, a text the model reads).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, Protocol

import structlog
from redis.asyncio import Redis
from redis.exceptions import RedisError

from weft_sandbox.workspace import Workspace, WorkspacePool

log = structlog.get_logger(__name__)

DEFAULT_LEASE_S = 30.0
"""How long a replica's published bytes count without a heartbeat (one every third)."""


@dataclass(frozen=True)
class OverCap:
    """A cap the workspaces would pass, after every idle workspace that could go went."""

    scope: Literal["tenant", "replica"]
    held: int
    """The bytes the workspaces would hold (the tenant's across replicas, or the replica's)."""
    cap: int

    def reason(self) -> str:
        """What the model (or the files API's caller) reads."""
        whose = (
            "this tenant's sandbox workspaces across all sessions (WEFT_SANDBOX_TENANT_BYTES)"
            if self.scope == "tenant"
            else "the sandbox workspaces of this replica (WEFT_SANDBOX_REPLICA_BYTES)"
        )
        return (
            f"the cap of {_mib(self.cap)} ({self.cap} bytes) on {whose} is reached: they "
            f"would hold {self.held} bytes, and no idle workspace is left to release"
        )


class WorkspaceFull(RuntimeError):
    """No room for a session's workspace (restoring it would pass a cap)."""

    def __init__(self, over: OverCap):
        super().__init__(over.reason())
        self.over = over


class TenantLedger(Protocol):
    """Where replicas tell each other how many bytes they hold per tenant."""

    async def elsewhere(self, tenant_id: str) -> int:
        """The bytes of the tenant's workspaces on the other live replicas."""
        ...

    async def publish(self, held: dict[str, int]) -> None:
        """This replica holds ``held`` (tenant -> bytes) for the tenants named."""
        ...

    async def heartbeat(self, held: dict[str, int]) -> None:
        """This replica is alive and holds ``held``, and nothing for the tenants not in it."""
        ...

    async def withdraw(self) -> None:
        """This replica holds nothing any more (an orderly shutdown)."""
        ...


class RedisLedger:
    """:class:`TenantLedger` in Redis, shared by every replica of a deployment."""

    def __init__(
        self, redis: Redis, *, prefix: str, replica: str, lease_s: float = DEFAULT_LEASE_S
    ):
        self._redis = redis
        self._prefix = prefix
        self.replica = replica
        self.lease_s = lease_s
        self._published: set[str] = set()
        """Tenants this replica holds a field for (deleted when they reach 0)."""

    def _bytes_key(self, tenant_id: str) -> str:
        return f"weft:{self._prefix}sandboxbytes:{tenant_id}"

    def _alive_key(self, replica: str) -> str:
        return f"weft:{self._prefix}sandboxreplica:{replica}"

    async def elsewhere(self, tenant_id: str) -> int:
        """The live replicas' fields but this one's; dead replicas' fields are deleted."""
        key = self._bytes_key(tenant_id)
        fields = {_text(r): int(b) for r, b in (await self._redis.hgetall(key)).items()}
        others = [r for r in fields if r != self.replica]
        if not others:
            return 0
        alive = await self._redis.mget([self._alive_key(r) for r in others])
        dead = [r for r, beat in zip(others, alive, strict=True) if beat is None]
        if dead:
            await self._redis.hdel(key, *dead)
        return sum(fields[r] for r, beat in zip(others, alive, strict=True) if beat is not None)

    async def publish(self, held: dict[str, int]) -> None:
        """Renew the heartbeat and write this replica's field of each tenant in ``held``."""
        ttl = max(1, int(self.lease_s))
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.set(self._alive_key(self.replica), "1", ex=ttl)
            for tenant_id, size in held.items():
                key = self._bytes_key(tenant_id)
                if size > 0:
                    pipe.hset(key, self.replica, size)
                    pipe.expire(key, ttl)
                    self._published.add(tenant_id)
                elif tenant_id in self._published:
                    pipe.hdel(key, self.replica)
                    self._published.discard(tenant_id)
            await pipe.execute()

    async def heartbeat(self, held: dict[str, int]) -> None:
        """Publish every tenant's total, zeros for those this replica no longer holds."""
        await self.publish({**dict.fromkeys(self._published, 0), **held})

    async def withdraw(self) -> None:
        """Stop counting at once (an orderly shutdown)."""
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.delete(self._alive_key(self.replica))
            for tenant_id in self._published:
                pipe.hdel(self._bytes_key(tenant_id), self.replica)
            await pipe.execute()
        self._published.clear()


class WorkspaceBudget:
    """Keeps the workspaces within the tenant cap (across replicas) and the replica cap,
    evicting least recently used idle workspaces before refusing."""

    def __init__(
        self,
        pool: WorkspacePool,
        ledger: TenantLedger,
        *,
        tenant_bytes: int,
        replica_bytes: int,
        heartbeat_s: float = DEFAULT_LEASE_S / 3,
    ):
        self.pool = pool
        self.ledger = ledger
        self.tenant_bytes = tenant_bytes
        self.replica_bytes = replica_bytes
        self._heartbeat_s = heartbeat_s
        self._task: asyncio.Task[None] | None = None

    async def fit(self, space: Workspace, drop: Callable[[Workspace], None]) -> OverCap | None:
        """Measure ``space`` and make room for it by dropping (with ``drop``) idle
        workspaces, least recently used first; the cap still passed when none is left."""
        await asyncio.to_thread(self.pool.measure, space)
        while True:
            over = await self._over(space.tenant_id)
            if over is None:
                break
            tenant = space.tenant_id if over.scope == "tenant" else None
            victim = self.pool.least_recently_used(tenant, besides=space)
            if victim is None:
                break
            log.info("sandbox_workspace_evicted", cap=over.scope, session_id=victim.session_id,
                     bytes=victim.bytes_used, held=over.held, limit=over.cap)  # fmt: skip
            drop(victim)
            if victim.tenant_id != space.tenant_id:
                await self.publish(victim.tenant_id)
        await self.publish(space.tenant_id)
        return over

    async def publish(self, tenant_id: str) -> None:
        """Tell the other replicas what this one holds of ``tenant_id`` now."""
        try:
            await self.ledger.publish({tenant_id: self.pool.held(tenant_id)})
        except RedisError:  # the heartbeat publishes it again
            log.warning("sandbox_budget_publish_failed", tenant_id=tenant_id)

    async def _over(self, tenant_id: str) -> OverCap | None:
        try:
            elsewhere = await self.ledger.elsewhere(tenant_id)
        except RedisError:  # a call is not failed for it: this replica's part still counts
            log.warning("sandbox_budget_ledger_unavailable", tenant_id=tenant_id)
            elsewhere = 0
        tenant = self.pool.held(tenant_id) + elsewhere
        if tenant > self.tenant_bytes:
            return OverCap("tenant", tenant, self.tenant_bytes)
        replica = self.pool.held()
        if replica > self.replica_bytes:
            return OverCap("replica", replica, self.replica_bytes)
        return None

    async def start(self) -> None:
        """Start the heartbeat: the replica's totals, renewed before their lease ends."""
        await self.ledger.publish({})
        self._task = asyncio.create_task(self._beat())

    async def stop(self) -> None:
        """Stop the heartbeat and withdraw this replica's totals."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        with contextlib.suppress(Exception):  # best effort: the lease ends them anyway
            await self.ledger.withdraw()

    async def _beat(self) -> None:
        while True:
            await asyncio.sleep(self._heartbeat_s)
            try:
                await self.ledger.heartbeat(self.pool.tenants())
            except Exception:  # Redis away: the next beat tries again
                log.exception("sandbox_budget_heartbeat_failed")


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _mib(size: int) -> str:
    return f"{size / (1024 * 1024):.0f} MiB" if size >= 1024 * 1024 else f"{size} bytes"
