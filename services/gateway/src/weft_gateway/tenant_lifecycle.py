"""A tenant's deletion from start to finish, and the periodic maintenance job.

Deleting a tenant marks it ``deleting`` (its keys and end users get 403 from then on,
within the key cache time) and purges its data in a task of this process; when nothing is
left, its row goes and the audit log says so. The maintenance job, in every gateway
process but run by one at a time (a Redis lock per period), finishes any deletion left
unfinished (a gateway stopped mid-purge, an owner that could not be reached) and applies
each tenant's retention: messages older than ``messages_days`` are deleted (by memory,
which owns them); session streams get a TTL of at most
``streams_days`` (``EXPIRE ... LT``), so a stream not written for that long (plus at
most one job period) is gone.

A deletion is watched for ``watch_s`` after it finished: records of the tenant still on
Kafka (a lagging consumer's, a redelivered one's) may write a row or a stream again, so
each job run purges a watched tenant again when its residue is not empty, and its id
cannot be created again until the watch ends (a new tenant of that id would otherwise
receive the old one's late writes).
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import UTC, datetime, timedelta

import structlog
from redis.asyncio import Redis
from weft_storage.tenant_data import Scope

from weft_gateway.audit_log import AuditLog
from weft_gateway.tenant_owners import MemoryOwner, OwnerUnreachable
from weft_gateway.tenant_purge import DataPurger, stream_pattern
from weft_gateway.tenant_registry import Retention, TenantRegistry

log = structlog.get_logger(__name__)

SYSTEM_ACTOR = "system:maintenance"


class TenantLifecycle:
    """Starts and finishes tenant deletions; runs retention."""

    def __init__(
        self,
        *,
        memory: MemoryOwner,
        redis: Redis,
        registry: TenantRegistry,
        purger: DataPurger,
        audit: AuditLog,
        interval_s: float,
        lock_key: str,
        watch_s: float,
    ):
        self._memory = memory
        self._redis = redis
        self._registry = registry
        self._purger = purger
        self._audit = audit
        self._interval_s = interval_s
        self._lock_key = lock_key
        self._watch = timedelta(seconds=watch_s)
        self._purges: dict[str, asyncio.Task[bool]] = {}
        self._loop: asyncio.Task[None] | None = None

    def purge_in_background(self, tenant_id: str, actor: str) -> None:
        """Purge ``tenant_id`` in a task of this process (one at a time per tenant)."""
        if tenant_id in self._purges:
            return
        task = asyncio.create_task(self.finish_deletion(tenant_id, actor))
        self._purges[tenant_id] = task
        task.add_done_callback(lambda _: self._purges.pop(tenant_id, None))

    async def finish_deletion(self, tenant_id: str, actor: str) -> bool:
        """Purge the tenant; remove its row when nothing is left. Whether it is gone."""
        try:
            report = await self._purger.purge(Scope(tenant_id))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("tenant_purge_failed", tenant_id=tenant_id)
            await self._audit.append(
                actor=actor, action="tenant.purge", target_type="tenant",
                target_id=tenant_id, outcome="failed", error=repr(exc)[:2000],
            )  # fmt: skip
            return False
        detail = report.model_dump()
        if report.clean:
            await self._registry.remove(tenant_id)
        await self._audit.append(
            actor=actor, action="tenant.purge", target_type="tenant", target_id=tenant_id,
            outcome="ok" if report.clean else "failed", detail=detail,
        )  # fmt: skip
        return report.clean

    async def start(self) -> None:
        """Start the periodic job (startup hook)."""
        if self._interval_s > 0:
            self._loop = asyncio.create_task(self._run())

    async def stop(self) -> None:
        """Stop the job and any purge running here (shutdown hook); an unfinished purge
        is finished by the next job run, in this process or another."""
        tasks = [t for t in (self._loop, *self._purges.values()) if t is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _run(self) -> None:
        while True:
            try:
                if await self._redis.set(
                    self._lock_key, "1", nx=True, ex=max(1, int(self._interval_s))
                ):
                    await self.run_once()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("maintenance_failed")
            await asyncio.sleep(self._interval_s)

    async def watched(self, tenant_id: str | None = None) -> dict[str, datetime]:
        """Tenants (or only ``tenant_id``) whose deletion finished within the watch: id ->
        until when."""
        since = datetime.now(UTC) - self._watch
        done = await self._audit.last_done("tenant.purge", "tenant", since, tenant_id)
        return {t: at + self._watch for t, at in done.items()}

    async def id_free_at(self, tenant_id: str) -> datetime | None:
        """When ``tenant_id`` may be created again, if it is still watched."""
        return (await self.watched(tenant_id)).get(tenant_id)

    async def run_once(self) -> None:
        """One pass: unfinished deletions, late writes of deleted tenants, retention."""
        for tenant_id in await self._registry.deleting():
            if tenant_id not in self._purges:
                await self.finish_deletion(tenant_id, SYSTEM_ACTOR)
        await self.purge_late_writes()
        for tenant_id, retention in await self._registry.with_retention():
            await self.apply_retention(tenant_id, retention)

    async def purge_late_writes(self) -> None:
        """Purge again each watched tenant that has something again (and no row: a tenant
        being deleted is the loop above's, and a row of a live one is not ours to purge)."""
        watched = await self.watched()
        alive = await self._registry.existing(list(watched))
        for tenant_id in sorted(set(watched) - alive - set(self._purges)):
            residue = await self._purger.residue(Scope(tenant_id))
            if not residue.clean:
                found = {k: n for k, n in {**residue.rows, **residue.keys}.items() if n}
                log.warning("tenant_late_writes", tenant_id=tenant_id, found=found)
                await self.finish_deletion(tenant_id, SYSTEM_ACTOR)

    async def apply_retention(self, tenant_id: str, retention: Retention) -> None:
        """Delete the tenant's old messages (memory does); cap its streams' TTL. An
        unreachable memory is logged and tried again on the next run."""
        if retention.messages_days is not None:
            try:
                deleted = await self._memory.delete_messages_older_than(
                    tenant_id, retention.messages_days
                )
            except OwnerUnreachable as exc:
                log.warning("retention_messages_failed", tenant_id=tenant_id, reason=exc.reason)
            else:
                if deleted:
                    log.info("retention_messages", tenant_id=tenant_id, deleted=deleted)
        if retention.streams_days is not None:
            ttl = max(1, int(retention.streams_days * 86400))
            pattern = stream_pattern(tenant_id)
            if pattern is not None:
                async for key in self._redis.scan_iter(match=pattern, count=1000):
                    await self._redis.expire(key, ttl, lt=True)
