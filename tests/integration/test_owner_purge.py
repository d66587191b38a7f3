"""Tenant and user purges by owner (docs/admin.md, "Deleting data"), on the real PostgreSQL
and Redis: each owner's purge touches its own tables only; the gateway's purger asks every
owner over its internal routes (in-process apps here, the same routes and guard as the
services mount), reports an owner it could not reach as not done, leaves memory's
sessions (the index of a user's rows elsewhere) until every other owner is done, and a
second run finishes the job."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass

import httpx
import pytest
from fastapi import FastAPI
from redis.asyncio import Redis
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from weft_gateway.tenant_owners import LocalOwner, MemoryOwner, Owner, RemoteOwner
from weft_gateway.tenant_purge import DataPurger
from weft_memory.tenant_data_api import tenant_data_router
from weft_platform.credentials import load_verifier
from weft_platform.retry import RetryWindow
from weft_storage.owner_purge import OwnerPurge, owner_purge_router
from weft_storage.ownership import OWNED, OWNERS
from weft_storage.tenant_data import Scope, count_rows
from weft_testkit.credentials import DevCredentials, credentials_dir

Sessions = async_sessionmaker[AsyncSession]

SAMPLE = ("sessions", "messages", "memories", "sandbox_checkpoints",
          "message_suggestion_sets", "api_keys", "knowledge_bases")  # fmt: skip
"""The tables :func:`_populate` writes, of five owners."""


async def _populate(sessions: Sessions, tenant: str) -> dict[str, str]:
    """Users u1 and u2 of ``tenant`` with a session each (a message, a memory, a sandbox
    checkpoint, a suggestion set, a key), and a knowledge base; user -> session id."""
    made = {}
    async with sessions.begin() as s:
        for user in ("u1", "u2"):
            sid = made[user] = f"s-{secrets.token_hex(6)}"
            p = {"s": sid, "t": tenant, "u": user, "r": secrets.token_hex(6),
                 "i": secrets.token_hex(8)}  # fmt: skip
            for sql in (
                "INSERT INTO sessions (id, tenant_id, user_id, title, created_at, updated_at) "
                "VALUES (:s, :t, :u, '', now(), now())",
                "INSERT INTO messages (id, tenant_id, session_id, request_id, role, content, "
                'agent_steps, "references", is_completed, is_fallback, status, duration_ms, '
                "created_at, is_partial, images) VALUES (:i, :t, :s, :r, 'user', 'hi', '[]', "
                "'[]', true, false, 'done', 0, now(), false, '[]')",
                "INSERT INTO memories (id, tenant_id, user_id, content) VALUES (:i, :t, :u, 'f')",
                "INSERT INTO sandbox_checkpoints (tenant_id, session_id, seq, request_id, "
                "call_id, \"commit\") VALUES (:t, :s, 1, :r, 'c', 'abc')",
                "INSERT INTO message_suggestion_sets (tenant_id, assistant_message_id, "
                "placement, config_hash, locale, session_id, request_id, state) VALUES "
                "(:t, :i, 'after', 'h', 'en', :s, :r, 'ready')",
                "INSERT INTO api_keys (id, tenant_id, user_id, key_hash) VALUES (:i, :t, :u, :r)",
            ):
                await s.execute(text(sql), p)
        await s.execute(
            text("INSERT INTO knowledge_bases (id, tenant_id, name) VALUES (:i, :t, 'kb')"),
            {"i": secrets.token_hex(8), "t": tenant},
        )
    return made


async def _rows(sessions: Sessions, scope: Scope) -> dict[str, int]:
    counts = await count_rows(sessions, scope, OWNED)
    return {t: counts.get(t, 0) for t in SAMPLE}


def _tenant() -> str:
    return f"t-purge-{secrets.token_hex(4)}"


async def test_each_owner_purges_its_own_tables_and_no_other(sessions: Sessions) -> None:
    tenant, other = _tenant(), _tenant()
    for t in (tenant, other):
        await _populate(sessions, t)
    before_other = await _rows(sessions, Scope(other))
    purged: set[str] = set()
    for owner in ("sandbox", "suggestions", "gateway", "knowledge", "agent-config", "memory"):
        answer = await OwnerPurge(owner, sessions).purge(Scope(tenant))
        assert set(answer.deleted) <= set(OWNERS[owner]), (owner, answer.deleted)
        assert not any(answer.residue.values()), answer
        purged |= set(OWNERS[owner])
        left = await _rows(sessions, Scope(tenant))
        assert {t: n for t, n in left.items() if (n == 0) != (t in purged)} == {}, (owner, left)
    assert await _rows(sessions, Scope(other)) == before_other
    # Idempotent: a second purge finds nothing and says so.
    again = await OwnerPurge("memory", sessions).purge(Scope(tenant))
    assert again.deleted == {} and not any(again.residue.values())


class Switch(httpx.AsyncBaseTransport):
    """An in-process transport to an app that can be cut off (an owner that is down)."""

    def __init__(self, app: FastAPI):
        self._inner = httpx.ASGITransport(app=app)
        self.down = False

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if self.down:
            raise httpx.ConnectError("owner down", request=request)
        return await self._inner.handle_async_request(request)


@dataclass
class Owners:
    purger: DataPurger
    switches: dict[str, Switch]


@pytest.fixture
async def owners(sessions: Sessions, redis: Redis) -> AsyncIterator[Owners]:
    """The gateway's purger over the owners' routes (in-process apps with the deployed
    guard, the gateway's development credential) and its own tables in this process."""
    folder = credentials_dir()
    verifier, gateway = load_verifier(folder), DevCredentials.load(folder).gateway
    switches: dict[str, Switch] = {}
    remote: dict[str, RemoteOwner] = {}
    for name in ("memory", "agent-config", "knowledge", "sandbox", "suggestions"):
        app = FastAPI()
        if name == "memory":
            app.include_router(tenant_data_router(sessions, verifier))
        else:
            app.include_router(owner_purge_router(name, sessions, verifier))
        switches[name] = Switch(app)
        cls = MemoryOwner if name == "memory" else RemoteOwner
        remote[name] = cls(
            name, f"http://{name}", lambda aud, scope: gateway.service(aud, [scope]),
            timeout_s=30, retry=RetryWindow(window_s=0), transport=switches[name],
        )  # fmt: skip
    memory = remote.pop("memory")
    assert isinstance(memory, MemoryOwner)
    listed: list[Owner] = [LocalOwner("gateway", sessions)]
    purger = DataPurger(memory, [*listed, *remote.values()], redis)
    yield Owners(purger, switches)
    await purger.aclose()


async def test_an_unreachable_owner_leaves_the_purge_visibly_unfinished_until_retried(
    sessions: Sessions, owners: Owners
) -> None:
    tenant = _tenant()
    made = await _populate(sessions, tenant)
    u2_before = await _rows(sessions, Scope(tenant, "u2"))
    owners.switches["sandbox"].down = True
    first = await owners.purger.purge(Scope(tenant, "u1"))
    assert not first.clean
    assert first.owners["sandbox"].error and "ConnectError" in first.owners["sandbox"].error
    assert first.owners["memory"].error  # waits: its sessions index the sandbox's rows
    assert first.owners["suggestions"].error is None
    residue = await owners.purger.residue(Scope(tenant, "u1"))
    assert not residue.clean and residue.owners["sandbox"].error
    left = await _rows(sessions, Scope(tenant, "u1"))
    assert left["message_suggestion_sets"] == 0 and left["api_keys"] == 0
    assert left["sandbox_checkpoints"] == 1 and left["sessions"] == 1

    owners.switches["sandbox"].down = False
    second = await owners.purger.purge(Scope(tenant, "u1"))
    assert second.clean, second
    assert second.deleted_rows["sandbox_checkpoints"] == 1
    assert second.deleted_rows["sessions"] == 1
    assert not any((await _rows(sessions, Scope(tenant, "u1"))).values())
    assert (await owners.purger.residue(Scope(tenant, "u1"))).clean
    assert await _rows(sessions, Scope(tenant, "u2")) == u2_before
    async with sessions() as s:
        kept = "SELECT count(*) FROM sandbox_checkpoints WHERE session_id = :s"
        assert (await s.execute(text(kept), {"s": made["u2"]})).scalar_one() == 1

    whole = await owners.purger.purge(Scope(tenant))
    assert whole.clean, whole
    assert set(whole.owners) == set(OWNERS) and all(o.error is None for o in whole.owners.values())
    assert not any((await _rows(sessions, Scope(tenant))).values())


async def test_memory_down_purges_nothing_of_its_own_and_reports_it(
    sessions: Sessions, owners: Owners
) -> None:
    tenant = _tenant()
    await _populate(sessions, tenant)
    owners.switches["memory"].down = True
    report = await owners.purger.purge(Scope(tenant))
    assert not report.clean and report.owners["memory"].error
    left = await _rows(sessions, Scope(tenant))
    assert left["sessions"] == 2 and left["messages"] == 2 and left["sandbox_checkpoints"] == 0
    owners.switches["memory"].down = False
    assert (await owners.purger.purge(Scope(tenant))).clean
    assert not any((await _rows(sessions, Scope(tenant))).values())


async def test_retention_deletes_only_old_messages_of_the_tenant(
    sessions: Sessions, owners: Owners
) -> None:
    tenant, other = _tenant(), _tenant()
    for t in (tenant, other):
        await _populate(sessions, t)
    async with sessions.begin() as s:
        await s.execute(
            text("UPDATE messages SET created_at = now() - interval '3 days' "
                 "WHERE tenant_id = ANY(:t)"),
            {"t": [tenant, other]},
        )  # fmt: skip
    memory = owners.purger._memory
    assert await memory.delete_messages_older_than(tenant, 5) == 0
    assert await memory.delete_messages_older_than(tenant, 2) == 2
    assert (await _rows(sessions, Scope(tenant)))["messages"] == 0
    assert (await _rows(sessions, Scope(other)))["messages"] == 2
