"""The workspace budget's accounting (docs/sandbox.md, "Bounded workspaces"): a tenant's
bytes across replicas and a replica's in all, least recently used idle workspaces evicted
before a call is refused, busy ones never. The ledger is an in-memory stand-in for the
replicas' shared Redis (its Redis form: tests/integration/test_sandbox_workspace_ledger.py).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from weft_sandbox.settings import MIB
from weft_sandbox.workspace import Workspace, WorkspacePool
from weft_sandbox.workspace_budget import OverCap, WorkspaceBudget


class MemoryLedger:
    """Every replica's published bytes, one dict (replica -> tenant -> bytes)."""

    def __init__(self, shared: dict[str, dict[str, int]], replica: str):
        self.shared = shared
        self.replica = replica

    async def elsewhere(self, tenant_id: str) -> int:
        return sum(held.get(tenant_id, 0) for r, held in self.shared.items() if r != self.replica)

    async def publish(self, held: dict[str, int]) -> None:
        self.shared.setdefault(self.replica, {}).update(held)

    async def heartbeat(self, held: dict[str, int]) -> None:
        self.shared[self.replica] = dict(held)

    async def withdraw(self) -> None:
        self.shared.pop(self.replica, None)


@pytest.fixture
def pool(tmp_path: Path) -> Iterator[WorkspacePool]:
    # quota "checked" (never started: no tmpfs), so sizes are the files' sizes.
    made = WorkspacePool(tmp_path / "root", size_bytes=64 * MIB, uid_base=200_000)
    made.root.mkdir()
    yield made
    made.close()


def fill(pool: WorkspacePool, tenant: str, session: str, size: int) -> Workspace:
    """A workspace holding one file of ``size`` bytes (sparse: only its size counts)."""
    space = pool.get(tenant, session) or pool.create(tenant, session)
    with open(space.work / "big", "wb") as handle:
        os.truncate(handle.fileno(), size)
    return space


def budget(
    pool: WorkspacePool, shared: dict[str, dict[str, int]] | None = None, *,
    tenant: int = 8 * MIB, replica: int = 64 * MIB,
) -> WorkspaceBudget:  # fmt: skip
    ledger = MemoryLedger({} if shared is None else shared, "here")
    return WorkspaceBudget(pool, ledger, tenant_bytes=tenant, replica_bytes=replica)


async def test_a_tenant_within_its_cap_is_published(pool: WorkspacePool) -> None:
    shared: dict[str, dict[str, int]] = {}
    room = budget(pool, shared)
    one = fill(pool, "A", "s1", 3 * MIB)
    assert await room.fit(one, pool.drop) is None
    two = fill(pool, "A", "s2", 3 * MIB)
    assert await room.fit(two, pool.drop) is None
    assert shared["here"] == {"A": 6 * MIB} and pool.held("A") == 6 * MIB


async def test_the_least_recently_used_idle_workspace_of_the_tenant_goes_first(
    pool: WorkspacePool,
) -> None:
    room = budget(pool)
    oldest = fill(pool, "A", "s1", 3 * MIB)
    await room.fit(oldest, pool.drop)
    newer = fill(pool, "A", "s2", 3 * MIB)
    await room.fit(newer, pool.drop)
    other = fill(pool, "B", "s1", 6 * MIB)  # another tenant's: never evicted for A's cap
    await room.fit(other, pool.drop)
    newer.touch()
    oldest.last_used = newer.last_used - 10
    dropped: list[Workspace] = []

    def drop(space: Workspace) -> None:
        dropped.append(space)
        pool.drop(space)

    third = fill(pool, "A", "s3", 3 * MIB)
    assert await room.fit(third, drop) is None
    assert dropped == [oldest]
    assert pool.get("A", "s1") is None and pool.get("A", "s2") is newer
    assert pool.get("B", "s1") is other and pool.held("A") == 6 * MIB


async def test_bytes_held_on_other_replicas_count_and_busy_workspaces_stay(
    pool: WorkspacePool,
) -> None:
    shared = {"there": {"A": 4 * MIB}}
    room = budget(pool, shared)
    busy = fill(pool, "A", "s1", 2 * MIB)
    await room.fit(busy, pool.drop)
    await busy.lock.acquire()  # a call of that session is running
    grown = fill(pool, "A", "s2", 3 * MIB)
    over = await room.fit(grown, pool.drop)
    assert over == OverCap("tenant", 9 * MIB, 8 * MIB), over
    assert pool.get("A", "s1") is busy
    text = over.reason()
    assert "8 MiB" in text and "WEFT_SANDBOX_TENANT_BYTES" in text and str(9 * MIB) in text
    busy.lock.release()
    # Once idle, it is evicted instead of refusing.
    assert await room.fit(grown, pool.drop) is None
    assert pool.get("A", "s1") is None


async def test_the_replica_cap_evicts_any_tenants_idle_workspace(pool: WorkspacePool) -> None:
    room = budget(pool, tenant=64 * MIB, replica=10 * MIB)
    theirs = fill(pool, "B", "s1", 6 * MIB)
    await room.fit(theirs, pool.drop)
    mine = fill(pool, "A", "s1", 6 * MIB)
    assert await room.fit(mine, pool.drop) is None
    assert pool.get("B", "s1") is None and pool.held() == 6 * MIB
    alone = fill(pool, "A", "s1", 11 * MIB)
    over = await room.fit(alone, pool.drop)
    assert over is not None and over.scope == "replica" and over.cap == 10 * MIB
    assert "WEFT_SANDBOX_REPLICA_BYTES" in over.reason()


async def test_a_dropped_workspace_stops_counting_at_the_next_heartbeat(
    pool: WorkspacePool,
) -> None:
    shared: dict[str, dict[str, int]] = {}
    room = budget(pool, shared)
    space = fill(pool, "A", "s1", 3 * MIB)
    await room.fit(space, pool.drop)
    pool.drop(space)  # the idle reaper
    await room.ledger.heartbeat(pool.tenants())
    assert shared["here"] == {}
