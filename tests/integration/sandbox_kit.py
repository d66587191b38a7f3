"""An in-process sandbox service for tests: the real local backend (bubblewrap, prlimit,
pids cgroup), git checkpoints in the real PostgreSQL, call claims in the real Redis; only
the bus is a recorder."""

from __future__ import annotations

import secrets
import shutil
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from redis.asyncio import Redis
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from weft_contracts import (
    ToolCallCompletedData,
    ToolCallRequested,
    ToolCallRequestedData,
    ToolContext,
    Topic,
)
from weft_contracts.skill_packages import SkillPackage
from weft_platform.web_snapshots import MemorySnapshotStore
from weft_sandbox.checkpoints import CheckpointStore, GitCheckpoints
from weft_sandbox.local_backend import LocalBackend
from weft_sandbox.session_lock import SessionLock
from weft_sandbox.settings import MIB, SandboxSettings
from weft_sandbox.skill_installer import register_installer
from weft_sandbox.skill_source import SkillTaken
from weft_sandbox.skills import SkillLibrary
from weft_sandbox.tools import sandbox_registry
from weft_sandbox.worker import SandboxHost, SandboxWorker
from weft_sandbox.workspace import WorkspacePool
from weft_sandbox.workspace_budget import RedisLedger, WorkspaceBudget
from weft_storage.agent_config.skills import SkillExists, SkillStore
from weft_tool_catalog.sandbox_specs import SANDBOX_SPECS

TOOLS = sorted(s.name for s in SANDBOX_SPECS)
WORKSPACE_BYTES = 8 * MIB


class _Bus:
    """Records the results the worker publishes."""

    def __init__(self) -> None:
        self.published: list[tuple[Topic, Any]] = []

    async def publish(self, topic: Topic, message: Any) -> None:
        self.published.append((topic, message))


DECOY = Path("/var/tmp/weft-sandbox-decoy")
"""Where hostile calls aim instead of the host's own files (``/etc/passwd``...). The tests
run the service as root, and a guard is broken on purpose to check its test fails: aimed
at a real host file, that check would overwrite it (it did once). Files here are
sentinels the tests compare afterwards."""

SENTINEL = "decoy: must stay unchanged\n"


def decoy(name: str) -> Path:
    """A sentinel file ``DECOY/name`` (made afresh), outside every workspace."""
    path = DECOY / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(SENTINEL)
    return path


@dataclass
class Sandbox:
    """One in-process sandbox service: call it as a tenant's session."""

    worker: SandboxWorker
    bus: _Bus
    host: SandboxHost
    pool: WorkspacePool
    backend: LocalBackend
    tenant: str
    session: str
    skills: SkillLibrary

    async def call(
        self,
        tool: str,
        session: str | None = None,
        tenant: str | None = None,
        *,
        turn: str = "r1",
        allowed_skills: list[str] | None = None,
        agent_id: str = "a",
        **arguments: Any,
    ) -> ToolCallCompletedData:
        call = ToolCallRequested(
            tenant_id=tenant or self.tenant, session_id=session or self.session,
            request_id=turn,
            data=ToolCallRequestedData(
                call_id=f"call_{secrets.token_hex(6)}", tool_name=tool, arguments=arguments,
                round=0, deadline=datetime.now(UTC) + timedelta(seconds=120),
                context=ToolContext(user_id="u", agent_id=agent_id, allowed_tools=TOOLS,
                                    allowed_skills=allowed_skills),
            ),
        )  # fmt: skip
        await self.worker.handle(call)
        topic, result = self.bus.published[-1]
        assert topic is Topic.TOOL_RESULTS
        data: ToolCallCompletedData = result.data
        assert data.call_id == call.data.call_id
        return data

    async def still_serves(self) -> None:
        done = await self.call("shell_exec", command="echo alive")
        assert done.success and "alive" in done.output, done


class StoreSkills:
    """The sandbox's skill source as agent-config answers it for a tenant's own agent,
    read from ``skill_packages`` in process (agent-config's own routes, which also find
    a shared agent's owner, are tested in tests/security/test_skill_routes.py)."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession]):
        self._store = SkillStore(sessions)

    async def package(
        self, credential: str | None, tenant_id: str, agent_id: str, name: str
    ) -> SkillPackage | None:
        stored = await self._store.get(tenant_id, name)
        return None if stored is None else stored.package

    async def install(
        self, credential: str | None, tenant_id: str, session_id: str, package: SkillPackage
    ) -> dict[str, Any]:
        try:
            done = await self._store.install(tenant_id, package, installer_session=session_id)
        except SkillExists:
            raise SkillTaken(package.name) from None
        return {"name": done.name, "file_count": done.file_count, "digest": done.digest}


@asynccontextmanager
async def open_sandbox(
    sessions: async_sessionmaker[AsyncSession],
    redis: Redis,
    *,
    tenant: str | None = None,
    session: str | None = None,
    lock_wait_s: float = 30.0,
    tenant_bytes: int | None = None,
    prefix: str | None = None,
) -> AsyncIterator[Sandbox]:
    """A sandbox replica of its own (own root, own cgroup parent) on the shared stores;
    with ``tenant_bytes``, its workspaces are under that tenant cap, counted in Redis under
    ``prefix`` (replicas of one deployment share it)."""
    settings = SandboxSettings(
        sandbox_workspace_bytes=WORKSPACE_BYTES, sandbox_memory_bytes=256 * MIB,
        sandbox_pids=32, sandbox_cpu_seconds=20, sandbox_kill_grace_s=1.0,
        sandbox_file_bytes=16 * MIB,
    )  # fmt: skip
    instance = f"test-{secrets.token_hex(4)}"
    # Not under tmp_path: pytest's directories are closed to the sandbox's uid.
    root = Path(tempfile.mkdtemp(prefix="weft-sandbox-test-"))
    pool = WorkspacePool(root, size_bytes=WORKSPACE_BYTES, uid_base=200_000)
    backend = LocalBackend(settings, instance)
    backend.start()
    pool.start()
    engine = sessions.kw["bind"]  # the session locks of every replica share a database
    budget = None
    if tenant_bytes is not None:
        ledger = RedisLedger(redis, prefix=prefix or f"{instance}.", replica=instance)
        budget = WorkspaceBudget(
            pool, ledger, tenant_bytes=tenant_bytes, replica_bytes=64 * tenant_bytes
        )
    host = SandboxHost(
        pool, GitCheckpoints(CheckpointStore(sessions)), SessionLock(engine),
        lock_wait_s=lock_wait_s, budget=budget,
    )  # fmt: skip
    skills = SkillLibrary(StoreSkills(sessions), root.parent / f"{root.name}-skills")
    skills.start()
    bus = _Bus()
    registry = sandbox_registry(host, backend, MemorySnapshotStore(), skills)
    register_installer(registry, host, StoreSkills(sessions))
    worker = SandboxWorker(
        bus, registry, host, redis,  # type: ignore[arg-type]
        worker_name=instance, prefix=f"{instance}.",
    )  # fmt: skip
    try:
        yield Sandbox(
            worker, bus, host, pool, backend, tenant or f"tenant-{secrets.token_hex(4)}",
            session or f"session-{secrets.token_hex(4)}", skills,
        )  # fmt: skip
    finally:
        if budget is not None:
            await budget.stop()
        pool.close()
        backend.stop()
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(root.parent / f"{root.name}-skills", ignore_errors=True)
