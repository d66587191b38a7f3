"""SandboxWorker: one call from ``sandbox.calls`` in, one result on ``tool.results`` out.

Before a call runs, the worker holds the session's workspace: locked (the session's calls
run one at a time on a replica) and fresh (a replica whose copy is older than the newest
checkpoint in PostgreSQL, or that has none, restores it first, so a session survives its
replica). After a call that may have changed the workspace, a checkpoint is committed
(S-03; the last one of a turn is the turn's). A redelivered write call is never run again
(invariant 3): it is claimed in Redis first, as tool-exec does.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import structlog
from redis.asyncio import Redis
from weft_contracts import (
    OUTCOME_UNKNOWN_MARK,
    ToolCallRequested,
    Topic,
    tool_not_allowed,
)
from weft_contracts.tools import SHOWN_NAME_CHARS
from weft_platform.bus import EventBus
from weft_platform.metrics import observe_tool_call
from weft_tool_catalog import Refused, TimedOut, ToolInvocation, ToolOutcome, outcome_label
from weft_tool_catalog.registry import ToolRegistry
from weft_tool_catalog.sandbox_specs import SCRIPT_TOOLS

from weft_sandbox.checkpoints import GitCheckpoints
from weft_sandbox.session_lock import SessionLock, WorkspaceBusy
from weft_sandbox.workspace import Workspace, WorkspacePool, workspace_key
from weft_sandbox.workspace_budget import OverCap, WorkspaceBudget, WorkspaceFull

log = structlog.get_logger(__name__)

NO_SANDBOX = (
    "{tool}: no sandbox is configured on this deployment, so scripts and sandbox files "
    "cannot be used here (S-05); answer without {tool}"
)
OUTCOME_UNKNOWN = (
    "{tool}: outcome unknown - the sandbox replica running this call stopped before "
    "reporting. It is not run again; check the workspace before retrying."
)


CLAIM_TTL_S = 86_400
DEFAULT_LOCK_WAIT_S = 30.0
"""How long an upload or a download waits for a session's running call."""
BUSY = (
    "{tool}: the session's workspace stayed busy (an attachment upload or another call "
    "held it); retry"
)

CAPPED = (
    "{tool}: waited {waited:.0f}s behind this tenant's cap of {cap} concurrent sandbox calls "
    "(its other calls held every slot); deadline passed, so it was not run. Run fewer long "
    "commands at once, or shorter ones."
)

ALREADY_REPORTED = ToolOutcome(success=False, error="already reported")
"""A redelivered write call whose result is published: nothing to do (compared by
identity, never published)."""


class SandboxHost:
    """The sessions' workspaces on this replica, kept fresh against the checkpoints."""

    def __init__(
        self,
        pool: WorkspacePool,
        checkpoints: GitCheckpoints,
        session_lock: SessionLock | None = None,
        *,
        lock_wait_s: float = DEFAULT_LOCK_WAIT_S,
        budget: WorkspaceBudget | None = None,
    ):
        """``session_lock``: the lock across replicas that a change takes (None: this
        replica is the only one, as in tests of one host). ``budget``: the caps on the
        bytes of a tenant's and of this replica's workspaces (None: no caps)."""
        self.pool = pool
        self.budget = budget
        self.checkpoints = checkpoints
        self._session_lock = session_lock
        self.lock_wait_s = lock_wait_s
        self._locks: dict[str, asyncio.Lock] = {}

    @contextlib.asynccontextmanager
    async def hold(
        self, tenant_id: str, session_id: str, *, wait_s: float | None = None,
        change: bool = True,
    ) -> AsyncIterator[Workspace]:  # fmt: skip
        """The session's workspace, locked and up to date with its newest checkpoint.
        ``change``: the holder may change it and create a checkpoint, so no other replica
        may at the same time. :class:`WorkspaceBusy` when either lock is not had within
        ``wait_s`` (default ``lock_wait_s``)."""
        key = workspace_key(tenant_id, session_id)
        wait = self.lock_wait_s if wait_s is None else wait_s
        lock = self._locks.setdefault(key, asyncio.Lock())
        try:
            async with asyncio.timeout(wait):
                await lock.acquire()
        except TimeoutError:
            raise WorkspaceBusy(f"workspace busy for more than {wait:.0f}s") from None
        try:
            async with contextlib.AsyncExitStack() as stack:
                if change and self._session_lock is not None:
                    await stack.enter_async_context(self._session_lock.held(key, wait))
                space = self.pool.get(tenant_id, session_id)
                newest = await self.checkpoints.store.latest_seq(tenant_id, session_id)
                # Older: another replica (or a fork, a rollback) checkpointed since. Newer:
                # the session's checkpoints were deleted (its tenant or user was purged), so
                # its files must not come back either.
                if space is None or space.checkpoint_seq != newest:
                    space = self.pool.create(tenant_id, session_id)
                    space.lock = lock
                    await self.checkpoints.restore(space)
                    if (over := await self.keep_within_caps(space)) is not None:
                        raise WorkspaceFull(over)
                space.touch()
                yield space
                space.touch()
        finally:
            lock.release()

    async def keep_within_caps(self, space: Workspace) -> OverCap | None:
        """Measure ``space`` and make room for it under the caps (evicting idle
        workspaces); when none can be made, drop its local copy (its newest checkpoint
        stays, so a change since is undone) and return the cap it passed."""
        if self.budget is None:
            return None
        over = await self.budget.fit(space, self._drop)
        if over is not None:
            self.pool.drop(space)  # the lock stays: its holder is still running
            await self.budget.publish(space.tenant_id)
        return over

    def held(self, tenant_id: str, session_id: str) -> Workspace:
        """The workspace :meth:`hold` is holding for the current call."""
        space = self.pool.get(tenant_id, session_id)
        if space is None:
            raise RuntimeError("no workspace is held for this session")
        return space

    def reap(self, ttl_s: float) -> int:
        """Drop the local copies idle for ``ttl_s`` (S-05; their checkpoints stay)."""
        idle = self.pool.idle(ttl_s)
        for space in idle:
            self._drop(space)
        return len(idle)

    async def reap_purged(self) -> int:
        """Drop the local copies whose checkpoints are gone from PostgreSQL (a tenant or
        user deletion removed them): a purge leaves no file of the session on any replica
        past one reaper interval, whether or not the session is used again."""
        dropped, tenants = 0, set()
        for space in self.pool.idle(0):
            if space.checkpoint_seq == 0:
                continue  # never checkpointed: nothing of it was stored to be purged
            if await self.checkpoints.store.latest_seq(space.tenant_id, space.session_id):
                continue
            if not space.lock.locked():  # a call holding it sees the purge itself
                self._drop(space)
                dropped += 1
                tenants.add(space.tenant_id)
        if self.budget is not None:
            # At once, not at the next heartbeat: a purged tenant's entry in the ledger
            # (weft:<prefix>sandboxbytes:<tenant>) goes with its last workspace here.
            for tenant_id in tenants:
                await self.budget.publish(tenant_id)
        return dropped

    def _drop(self, space: Workspace) -> None:
        self.pool.drop(space)
        self._locks.pop(workspace_key(space.tenant_id, space.session_id), None)


class SandboxWorker:
    """Runs sandbox calls; every call ends in a published result."""

    def __init__(
        self,
        bus: EventBus,
        registry: ToolRegistry,
        host: SandboxHost | None,
        redis: Redis,
        *,
        worker_name: str,
        prefix: str,
    ):
        self._bus = bus
        self._registry = registry
        self._host = host
        self._redis = redis
        self._worker = worker_name
        self._prefix = prefix

    async def handle(self, call: ToolCallRequested) -> None:
        """Run ``call`` (or refuse it) and publish its result."""
        started = time.monotonic()
        name = call.data.tool_name
        if not call.data.context.permits(name):
            log.warning("tool_not_allowed", tool=name[:SHOWN_NAME_CHARS], call_id=call.data.call_id)
            error = tool_not_allowed(name, call.data.context.allowed_tools)
            await self._publish(call, Refused(success=False, error=error), started)
            return
        if self._host is None and name in SCRIPT_TOOLS:
            error = NO_SANDBOX.format(tool=name[:SHOWN_NAME_CHARS])
            await self._publish(call, ToolOutcome(success=False, error=error), started)
            return
        spec = self._registry.spec(name)
        is_write = spec is not None and not spec.read_only
        outcome = await self._run(call, is_write)
        if outcome is ALREADY_REPORTED:
            log.info("write_call_already_reported", call_id=call.data.call_id)
            return
        await self._publish(call, outcome, started)
        if is_write:
            await self._redis.set(self._claim_key(call), "done", ex=CLAIM_TTL_S)

    async def _run(self, call: ToolCallRequested, is_write: bool) -> ToolOutcome:
        name = call.data.tool_name
        remaining = (call.data.deadline - datetime.now(UTC)).total_seconds()
        if remaining <= 0:
            return ToolOutcome(success=False, error=f"{name}: deadline passed before it could run")
        invocation = ToolInvocation(
            tenant_id=call.tenant_id, session_id=call.session_id, request_id=call.request_id,
            arguments=call.data.arguments, context=call.data.context, credential=call.credential,
        )  # fmt: skip
        if self._host is None or not self._needs_workspace(call):
            return await self._execute(name, invocation, remaining)
        # The workspace first: a failure to get it (PostgreSQL down) raises before the
        # claim, so the redelivered call runs instead of being reported as unknown.
        try:
            async with self._host.hold(
                call.tenant_id, call.session_id, wait_s=remaining, change=is_write
            ) as space:
                if is_write and not await self._redis.set(
                    self._claim_key(call), self._worker, nx=True, ex=CLAIM_TTL_S
                ):
                    if await self._redis.get(self._claim_key(call)) == b"done":
                        return ALREADY_REPORTED
                    return ToolOutcome(  # the engine asks a person (SPEC H-05)
                        success=False, error=OUTCOME_UNKNOWN.format(tool=name),
                        data={OUTCOME_UNKNOWN_MARK: True},
                    )  # fmt: skip
                left = (call.data.deadline - datetime.now(UTC)).total_seconds()
                outcome = await self._execute(name, invocation, max(left, 0.001))
                if is_write:
                    outcome = await self._after_write(space, call, outcome)
        except WorkspaceBusy:
            return ToolOutcome(success=False, error=BUSY.format(tool=name))
        except WorkspaceFull as full:
            error = f"{name}: no room to open this session's workspace: {full}"
            return ToolOutcome(success=False, error=error)
        return outcome

    async def handle_overdue(self, call: ToolCallRequested, waited_s: float, cap: int) -> None:
        """Answer a call whose deadline passed while it waited for a runner (its tenant at
        its cap of ``cap`` calls, or its session's earlier call still running)."""
        error = CAPPED.format(tool=call.data.tool_name[:SHOWN_NAME_CHARS], waited=waited_s, cap=cap)
        log.info("sandbox_call_overdue", call_id=call.data.call_id, waited_s=round(waited_s, 1))
        await self._publish(call, TimedOut(success=False, error=error), time.monotonic())

    def _claim_key(self, call: ToolCallRequested) -> str:
        return f"weft:{self._prefix}sandboxcall:{call.scoped_call_id()}"

    @staticmethod
    def _needs_workspace(call: ToolCallRequested) -> bool:
        path = call.data.arguments.get("path")
        return not (call.data.tool_name == "read_file" and isinstance(path, str)
                    and path.strip().startswith(("web://", "skill://")))  # fmt: skip

    async def _execute(
        self, name: str, invocation: ToolInvocation, remaining: float
    ) -> ToolOutcome:
        try:
            async with asyncio.timeout(remaining):
                return await self._registry.execute(name, invocation)
        except TimeoutError:
            return TimedOut(success=False, error=f"{name}: timed out after {remaining:.0f}s")
        except Exception as exc:  # a broken tool is reported to the model, not a crash
            log.exception("sandbox_tool_failed", tool=name)
            detail = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            return ToolOutcome(
                success=False, error=f"{name} failed: {type(exc).__name__}: {detail}"
            )

    async def _after_write(
        self, space: Workspace, call: ToolCallRequested, outcome: ToolOutcome
    ) -> ToolOutcome:
        """Keep the size cap where no tmpfs keeps it and the tenant's and replica's caps,
        then checkpoint."""
        assert self._host is not None
        used = self._host.pool.over_cap(space)
        if used is not None:
            self._host.pool.drop(space)  # the next call restores the last checkpoint
            cap = self._host.pool.size_bytes
            error = (
                f"{call.data.tool_name}: the workspace grew to {used} bytes, over its "
                f"{cap}-byte cap; this call's changes were undone"
            )
            return ToolOutcome(success=False, error=error)
        if (over := await self._host.keep_within_caps(space)) is not None:
            error = f"{call.data.tool_name}: {over.reason()}; this call's changes were undone"
            return ToolOutcome(success=False, error=error)
        done = await self._host.checkpoints.commit(
            space, request_id=call.request_id, call_id=call.data.call_id
        )
        if done is None:
            return outcome
        data: dict[str, Any] = {**outcome.data, "checkpoint": done.seq}
        if done.outputs:
            data["deliverables"] = [{"path": f.path, "size": f.size} for f in done.outputs]
        return ToolOutcome(
            success=outcome.success, output=outcome.output, error=outcome.error,
            display_type=outcome.display_type, data=data,
        )  # fmt: skip

    async def _publish(self, call: ToolCallRequested, outcome: ToolOutcome, started: float) -> None:
        seconds = time.monotonic() - started
        result = outcome.answering(call, duration_ms=int(seconds * 1000), worker=self._worker)
        await self._bus.publish(Topic.TOOL_RESULTS, result)
        tool = self._registry.metric_name(call.data.tool_name)
        observe_tool_call(tool, outcome_label(outcome), seconds, call.tenant_id)
