"""The gateway's session directory on the real Redis and memory's real session API on the
real PostgreSQL (in-process): cache hits, tombstones, tenant isolation (invariant 5) and a
memory that does not answer (invariant 6: 503 with Retry-After, never a hang)."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator
from typing import Any

import pytest
from fastapi import FastAPI, HTTPException
from redis.asyncio import Redis
from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker
from weft_gateway.clients import SessionsClient
from weft_gateway.session_cache import TOMBSTONE, SessionDirectory, session_key
from weft_memory.api import session_router
from weft_testkit.credentials import trusted

from tests.workspaces_kit import sandbox_workspaces


@pytest.fixture
async def memory(engine: AsyncEngine) -> AsyncIterator[SessionsClient]:
    """A SessionsClient talking to memory's real session routes (in-process, real PG)."""
    app = FastAPI()
    sessions = async_sessionmaker(engine, expire_on_commit=False)
    app.include_router(session_router(sessions, sandbox_workspaces(sessions)))
    client = SessionsClient("http://memory", "memory", transport=trusted(app))
    yield client
    await client.aclose()


def _directory(redis: Redis, memory: SessionsClient, ttl_s: int = 60) -> SessionDirectory:
    return SessionDirectory(redis, memory, ttl_s=ttl_s, lookup_timeout_s=2.0)


async def _new_session(memory: SessionsClient, agent_id: str | None = "ag-1") -> dict[str, Any]:
    tenant = f"t-{secrets.token_hex(4)}"
    session: dict[str, Any] = await memory.create_session(tenant, "u1", "cache test", agent_id)
    return session


async def test_a_lookup_is_answered_from_redis_after_the_first(
    redis: Redis, memory: SessionsClient
) -> None:
    """Chat does not ask memory per message: once filled, the facts come from Redis (so a
    change made behind the gateway's back is seen only after the TTL)."""
    session = await _new_session(memory)
    tenant, sid = session["tenant_id"], session["id"]
    directory = _directory(redis, memory)
    first = await directory.lookup(tenant, sid, user_id="u1")
    assert (first.tenant_id, first.user_id, first.agent_id) == (tenant, "u1", "ag-1")
    assert 0 < await redis.ttl(session_key(tenant, sid)) <= 60
    await memory.update_session(tenant, "u1", sid, {"agent_id": "ag-behind-the-back"})
    assert (await directory.lookup(tenant, sid, user_id="u1")).agent_id == "ag-1"


async def test_updates_through_the_gateway_replace_the_facts(
    redis: Redis, memory: SessionsClient
) -> None:
    session = await _new_session(memory)
    directory = _directory(redis, memory)
    await directory.remember(session)
    changed = await memory.update_session(
        session["tenant_id"], "u1", session["id"], {"agent_id": "b"}
    )
    await directory.updated(changed)
    assert (
        await directory.lookup(session["tenant_id"], session["id"], user_id="u1")
    ).agent_id == "b"


async def test_a_deleted_session_is_404_and_a_late_fill_cannot_bring_it_back(
    redis: Redis, memory: SessionsClient
) -> None:
    """Deleted through one gateway replica, the session is 404 on another at once; a lookup
    on a third that read memory just before the delete must not make it chat-able again:
    fills never overwrite the tombstone."""
    session = await _new_session(memory)
    tenant, sid = session["tenant_id"], session["id"]
    replica_a, replica_b = _directory(redis, memory), _directory(redis, memory)
    await replica_b.lookup(tenant, sid, user_id="u1")
    await memory.delete_session(tenant, "u1", sid)
    await replica_a.deleted(tenant, sid)
    await _directory(redis, memory).remember(session)  # the racing replica's stale fill
    assert await redis.get(session_key(tenant, sid)) == TOMBSTONE
    with pytest.raises(HTTPException) as gone:
        await replica_b.lookup(tenant, sid, user_id="u1")
    assert gone.value.status_code == 404


async def test_another_tenants_session_id_is_404_even_when_cached(
    redis: Redis, memory: SessionsClient
) -> None:
    """Invariant 5: the cache key holds the tenant; a filled entry never answers another."""
    session = await _new_session(memory)
    directory = _directory(redis, memory)
    await directory.lookup(session["tenant_id"], session["id"], user_id="u1")
    with pytest.raises(HTTPException) as foreign:
        await directory.lookup(f"t-{secrets.token_hex(4)}", session["id"], user_id="u1")
    assert foreign.value.status_code == 404


async def test_another_users_lookup_is_404_on_a_miss_and_on_a_hit(
    redis: Redis, memory: SessionsClient
) -> None:
    """A session belongs to its user: on a miss memory's own check answers 404 (and fills
    nothing), and once the owner's lookup has filled the tenant-wide entry, the hit is
    still 404 for another user of the same tenant."""
    session = await _new_session(memory)
    tenant, sid = session["tenant_id"], session["id"]
    directory = _directory(redis, memory)
    with pytest.raises(HTTPException) as miss:
        await directory.lookup(tenant, sid, user_id="u2")
    assert miss.value.status_code == 404
    assert await redis.get(session_key(tenant, sid)) is None
    assert (await directory.lookup(tenant, sid, user_id="u1")).user_id == "u1"
    assert await redis.get(session_key(tenant, sid)) is not None
    with pytest.raises(HTTPException) as hit:
        await directory.lookup(tenant, sid, user_id="u2")
    assert hit.value.status_code == 404
    assert hit.value.detail == miss.value.detail


async def test_a_memory_that_does_not_answer_gives_503_within_the_lookup_timeout(
    redis: Redis,
) -> None:
    """A miss while memory hangs: 503 with Retry-After and the reason, after the short
    lookup timeout rather than the 10 s of other calls."""
    held: list[asyncio.StreamWriter] = []

    async def never_answer(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)

    server = await asyncio.start_server(never_answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    memory = SessionsClient(f"http://127.0.0.1:{port}", "memory", timeout_s=30.0)
    directory = SessionDirectory(redis, memory, ttl_s=60, lookup_timeout_s=0.3)
    try:
        with pytest.raises(HTTPException) as down:
            # The guard is far below the client's 30 s: only the lookup timeout can end it.
            lookup = directory.lookup("t-down", f"ses_{secrets.token_hex(6)}", user_id="u1")
            await asyncio.wait_for(lookup, timeout=20)
    finally:
        await memory.aclose()
        for writer in held:
            writer.close()
        server.close()
    assert down.value.status_code == 503
    assert down.value.headers == {"Retry-After": "2"}
    assert "memory unavailable: no answer in time" in str(down.value.detail)
