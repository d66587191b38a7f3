"""App factory of the sandbox service: a fair consumer of ``sandbox.calls`` with
``sandbox_concurrency`` runners, the local or Kubernetes backend, checkpoints in PostgreSQL
and the idle reaper."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Awaitable, Callable
from datetime import datetime
from pathlib import Path

import structlog
from fastapi import FastAPI
from sqlalchemy.ext.asyncio import create_async_engine
from weft_contracts import ToolCallRequested, Topic
from weft_platform.app import create_service_app, init_logging
from weft_platform.fair_buffer import ReadAhead
from weft_platform.fair_consumer import FairConsumer
from weft_platform.internal_auth import InternalAuth
from weft_platform.metrics import SANDBOX_WORKSPACE_BYTES, SANDBOX_WORKSPACES_OPEN
from weft_platform.runtime import ServiceRuntime, create_runtime
from weft_platform.session_owner import SessionOwners
from weft_platform.tenant_slots import TenantSlots
from weft_platform.web_snapshots import RedisSnapshotStore
from weft_storage.owner_purge import owner_purge_router

from weft_sandbox.backend import SandboxBackend
from weft_sandbox.checkpoints import CheckpointStore, GitCheckpoints
from weft_sandbox.checkpoints_api import SYSTEM_ROUTES as CHECKPOINT_ROUTES
from weft_sandbox.checkpoints_api import checkpoints_router
from weft_sandbox.files_api import files_router, session_owner
from weft_sandbox.k8s_backend import KubernetesBackend
from weft_sandbox.local_backend import LocalBackend
from weft_sandbox.session_files import SessionFiles
from weft_sandbox.session_lock import SessionLock
from weft_sandbox.settings import SandboxSettings
from weft_sandbox.skill_installer import register_installer
from weft_sandbox.skill_source import AgentConfigSkills
from weft_sandbox.skills import SkillLibrary
from weft_sandbox.tools import sandbox_registry
from weft_sandbox.worker import SandboxHost, SandboxWorker
from weft_sandbox.workspace import WorkspacePool
from weft_sandbox.workspace_budget import RedisLedger, WorkspaceBudget

__all__ = ["CONSUMER_GROUP", "IdleReaper", "SandboxSettings", "create_app"]

log = structlog.get_logger(__name__)

CONSUMER_GROUP = "weft-sandbox"


class IdleReaper:
    """Drops local workspaces idle past the TTL (S-05), and those whose checkpoints a
    purge deleted, every ``interval_s``."""

    def __init__(self, host: SandboxHost, ttl_s: float, interval_s: float):
        self._host = host
        self._ttl_s = ttl_s
        self._interval_s = interval_s
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Start the loop."""
        self._task = asyncio.create_task(self._loop())

    async def stop(self) -> None:
        """Stop the loop and wait for it."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self._interval_s)
            try:
                if reaped := self._host.reap(self._ttl_s):
                    log.info("sandbox_reaped", workspaces=reaped, left=len(self._host.pool))
                if purged := await self._host.reap_purged():
                    log.info("sandbox_purged_dropped", workspaces=purged)
            except Exception:  # the next round tries again; calls keep being served
                log.exception("sandbox_reap_failed")


def create_app(settings: SandboxSettings | None = None) -> FastAPI:
    """Wire the worker to ``sandbox.calls``."""
    settings = settings or SandboxSettings()
    runtime = create_runtime(settings)
    init_logging(runtime)
    snapshots = RedisSnapshotStore(runtime.redis)
    host: SandboxHost | None = None
    backend: SandboxBackend | None = None
    skills: SkillLibrary | None = None
    skill_source = AgentConfigSkills(settings.agent_config_url, settings.internal_timeout_s)
    on_startup: list[Callable[[], Awaitable[None]]] = []
    on_shutdown: list[Callable[[], Awaitable[None]]] = []
    if settings.sandbox_backend != "none":
        home = Path(os.environ.get("WEFT_HOME") or Path.cwd() / ".weft")
        root = Path(settings.sandbox_root or home / "sandbox" / runtime.instance_id)
        pool = WorkspacePool(
            root, size_bytes=settings.sandbox_workspace_bytes, uid_base=settings.sandbox_uid_base
        )
        SANDBOX_WORKSPACES_OPEN.set_function(pool.__len__)  # read when Prometheus scrapes
        SANDBOX_WORKSPACE_BYTES.set_function(pool.bytes_used)
        # A connection per session lock held (calls and uploads), apart from the pool the
        # held sessions' checkpoint queries use, so holders never wait on each other.
        locks_db = create_async_engine(
            settings.database_url, pool_size=settings.sandbox_concurrency + 2,
            max_overflow=8, pool_pre_ping=True,
        )  # fmt: skip
        budget = WorkspaceBudget(
            pool,
            RedisLedger(runtime.redis, prefix=settings.topic_prefix, replica=runtime.instance_id),
            tenant_bytes=settings.sandbox_tenant_bytes,
            replica_bytes=settings.sandbox_replica_bytes,
        )
        host = SandboxHost(
            pool, GitCheckpoints(CheckpointStore(runtime.sessions)), SessionLock(locks_db),
            lock_wait_s=settings.sandbox_files_wait_s, budget=budget,
        )  # fmt: skip
        reaper = IdleReaper(host, settings.sandbox_idle_ttl_s, settings.sandbox_reap_interval_s)
        skills = SkillLibrary(skill_source, root.parent / f"{root.name}-skills")
        library = skills
        if settings.sandbox_backend == "kubernetes":
            pods = KubernetesBackend(settings)
            backend = pods
            start_backend: Callable[[], Awaitable[None]] = pods.start
            stop_backend: Callable[[], Awaitable[None]] = pods.stop
        else:
            local = LocalBackend(settings, runtime.instance_id)
            backend = local

            async def start_backend() -> None:
                local.start()

            async def stop_backend() -> None:
                local.stop()

        async def start_sandbox() -> None:
            await start_backend()
            pool.start()
            library.start()
            await budget.start()
            await reaper.start()

        async def stop_sandbox() -> None:
            await reaper.stop()
            await budget.stop()
            pool.close()
            library.stop()
            await stop_backend()
            await locks_db.dispose()

        on_startup.append(start_sandbox)
        on_shutdown.append(stop_sandbox)
    registry = sandbox_registry(host, backend, snapshots, skills)
    if host is not None:
        register_installer(registry, host, skill_source)
    worker = SandboxWorker(
        runtime.bus, registry, host, runtime.redis,
        worker_name=runtime.instance_id, prefix=settings.topic_prefix,
    )  # fmt: skip
    calls = fair_calls(runtime, settings, worker)
    on_startup.append(calls.start)
    on_shutdown.insert(0, calls.stop)  # the calls end before the workspaces go
    files = SessionFiles(host) if host is not None else None
    owners = SessionOwners(settings.memory_url, settings.internal_timeout_s)
    on_shutdown += [owners.aclose, skill_source.aclose]
    app = create_service_app(
        runtime, title="weft sandbox", on_startup=on_startup, on_shutdown=on_shutdown,
        routers=[
            files_router(files, settings.sandbox_attachment_bytes, session_owner(owners)),
            checkpoints_router(runtime.sessions),
        ],
        internal=InternalAuth(runtime.verifier, "sandbox", CHECKPOINT_ROUTES),
    )  # fmt: skip
    app.include_router(owner_purge_router("sandbox", runtime.sessions, runtime.verifier))
    return app


def fair_calls(
    runtime: ServiceRuntime, settings: SandboxSettings, worker: SandboxWorker
) -> FairConsumer:
    """The consumer of ``sandbox.calls``, as tool-exec's of ``tool.calls``
    (docs/fairness.md): ``sandbox_concurrency`` runners taking calls round-robin by tenant,
    a tenant capped at ``sandbox_tenant_max_inflight`` calls across replicas and
    ``sandbox_tenant_max_local`` runners here. Besides: a session's calls (the record key)
    run one at a time in order, a tenant's backlog past the read-ahead is parked rather
    than holding its partition back, and a call still waiting at its deadline is answered
    with an error naming the cap."""
    cap = settings.sandbox_tenant_max_inflight
    slots = TenantSlots(
        runtime.redis, f"{settings.topic_prefix}sandbox", cap=cap,
        lease_s=settings.sandbox_slot_lease_s,
    )  # fmt: skip

    async def overdue(call: ToolCallRequested, waited_s: float) -> None:
        await worker.handle_overdue(call, waited_s, cap)

    calls = FairConsumer(
        runtime.bus, Topic.SANDBOX_CALLS, CONSUMER_GROUP, worker.handle,
        slots=slots, concurrency=settings.sandbox_concurrency,
        read_ahead=ReadAhead(
            max_buffered=settings.sandbox_read_ahead,
            partition_buffer=settings.sandbox_partition_read_ahead,
            partition_window=max(
                settings.sandbox_partition_window, settings.sandbox_partition_read_ahead
            ),
        ),
        holder_prefix=runtime.instance_id, tenant_max_local=settings.sandbox_tenant_max_local,
        serialize_keys=True, deadline_of=_deadline, overdue=overdue,
    )  # fmt: skip
    calls.register()
    return calls


def _deadline(call: ToolCallRequested) -> datetime:
    return call.data.deadline
