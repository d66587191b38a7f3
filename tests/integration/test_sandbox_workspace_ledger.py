"""The workspace ledger in the real Redis (docs/sandbox.md, "Bounded workspaces"): each
replica sees the bytes the other live replicas hold for a tenant; a replica that stops
beating stops counting (its field is dropped), one that shuts down withdraws at once, and
every key expires unless renewed. Then two in-process replicas of one deployment (real
bubblewrap, PostgreSQL checkpoints) held to one tenant cap together."""

from __future__ import annotations

import secrets

import pytest
from redis.asyncio import Redis
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from weft_sandbox.session_files import FileRefused, SessionFiles
from weft_sandbox.settings import MIB
from weft_sandbox.workspace_budget import RedisLedger, WorkspaceFull

from tests.integration.sandbox_kit import open_sandbox


def ledgers(redis: Redis, *replicas: str) -> list[RedisLedger]:
    prefix = f"t{secrets.token_hex(4)}."
    return [RedisLedger(redis, prefix=prefix, replica=r, lease_s=30) for r in replicas]


async def test_replicas_see_each_others_bytes_per_tenant(redis: Redis) -> None:
    a, b, c = ledgers(redis, "a", "b", "c")
    await a.publish({"T": 3 * MIB, "U": MIB})
    await b.publish({"T": 2 * MIB})
    assert await c.elsewhere("T") == 5 * MIB
    assert await a.elsewhere("T") == 2 * MIB  # its own field is its pool's business
    assert await b.elsewhere("U") == MIB and await b.elsewhere("V") == 0
    key = "weft:" + a._prefix + "sandboxbytes:T"
    assert 0 < await redis.ttl(key) <= 30  # an abandoned tenant's hash goes by itself
    await a.heartbeat({"U": MIB})  # a dropped its T workspaces
    assert await c.elsewhere("T") == 2 * MIB


async def test_a_dead_replica_stops_counting(redis: Redis) -> None:
    a, b = ledgers(redis, "a", "b")
    await a.publish({"T": 3 * MIB})
    # Its heartbeat lapses (the key expires when nobody renews it: deleted here).
    alive = "weft:" + a._prefix + "sandboxreplica:a"
    assert 0 < await redis.ttl(alive) <= 30
    await redis.delete(alive)
    assert await b.elsewhere("T") == 0
    assert await redis.hkeys("weft:" + a._prefix + "sandboxbytes:T") == []


async def test_a_replica_that_shuts_down_withdraws(redis: Redis) -> None:
    a, b = ledgers(redis, "a", "b")
    await a.publish({"T": 3 * MIB})
    await a.withdraw()
    assert await b.elsewhere("T") == 0


async def test_the_tenant_cap_counts_what_other_replicas_hold(
    sessions: async_sessionmaker[AsyncSession], redis: Redis
) -> None:
    """Two replicas of one deployment: what the first holds of a tenant leaves the second
    no room; a replica that holds nothing idle of it refuses, and undoes, the write."""
    fill = f"head -c {3 * MIB} /dev/urandom > big && echo wrote"
    prefix = f"t{secrets.token_hex(4)}."
    async with (
        open_sandbox(sessions, redis, tenant_bytes=8 * MIB, prefix=prefix) as first,
        open_sandbox(sessions, redis, tenant_bytes=8 * MIB, prefix=prefix,
                     tenant=first.tenant) as second,
    ):  # fmt: skip
        for session in ("s1", "s2"):
            done = await first.call("shell_exec", session=session, command=fill)
            assert done.success and "wrote" in done.output, done
        kept = await second.call("write_sandbox_file", session="s3", path="a.txt", content="a")
        assert kept.success, kept
        over = await second.call("shell_exec", session="s3", command=fill)
        assert not over.success and "WEFT_SANDBOX_TENANT_BYTES" in (over.error or ""), over
        assert "undone" in (over.error or "") and first.pool.held(first.tenant) >= 6 * MIB
        after = await second.call("shell_exec", session="s3", command="ls")
        assert after.output.split("stdout:\n")[1].split()[:1] == ["a.txt"], after.output
        # Another tenant on the same replica is not held to the first one's bytes.
        other = await second.call("shell_exec", session="s3", tenant="tenant-x", command=fill)
        assert other.success, other


async def test_a_workspace_that_would_pass_the_cap_is_not_opened(
    sessions: async_sessionmaker[AsyncSession], redis: Redis
) -> None:
    """A session restored on a replica with nothing idle to release: the call is refused
    with the cap named, a listing or download is refused (the files API answers 409), and
    an upload that would pass the cap is refused (413)."""
    fill = f"head -c {3 * MIB} /dev/urandom > big && echo wrote"
    prefix = f"t{secrets.token_hex(4)}."
    async with (
        open_sandbox(sessions, redis, tenant_bytes=8 * MIB, prefix=prefix) as first,
        open_sandbox(sessions, redis, tenant_bytes=8 * MIB, prefix=prefix,
                     tenant=first.tenant) as second,
    ):  # fmt: skip
        assert (await second.call("shell_exec", session="s3", command=fill)).success
        assert second.host.reap(0) == 1  # idle: dropped, its checkpoint stays
        assert second.host.budget is not None
        await second.host.budget.ledger.heartbeat(second.pool.tenants())
        for session in ("s1", "s2"):
            assert (await first.call("shell_exec", session=session, command=fill)).success
        refused = await second.call("shell_exec", session="s3", command="ls")
        error = refused.error or ""
        assert not refused.success and "no room to open" in error, refused
        assert "WEFT_SANDBOX_TENANT_BYTES" in error and second.pool.held() == 0, refused
        files = SessionFiles(second.host)
        with pytest.raises(WorkspaceFull):
            await files.list(second.tenant, "s3", "output")
        with pytest.raises(FileRefused) as upload:
            await files.upload(second.tenant, "s4", "big.csv", b"x" * (3 * MIB))
        assert upload.value.status == 413 and "WEFT_SANDBOX_TENANT_BYTES" in upload.value.reason
        assert second.pool.held() == 0
