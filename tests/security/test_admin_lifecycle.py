"""Deleting a tenant or a user leaves nothing behind, on the real stack: data made through
the public API (sessions, turns, knowledge bases, agents, keys, a sandbox workspace) by
tenants A and B; after A's deletion PostgreSQL, Redis and the sandbox replica's disk hold
nothing of A and everything of B. Retention deletes a tenant's old messages and streams."""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path
from typing import Any

import httpx
from redis.asyncio import Redis
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine
from weft_testkit import read_turn

from tests.e2e.sandbox_helpers import sandbox_session, scripted_turn
from tests.security.admin_fixtures import AdminStack, sandbox_root

AGENT = "builtin-smart-reasoning"


async def _populate(admin_stack: AdminStack, tenant: str, user: str) -> dict[str, Any]:
    """A key, a KB with a document, an agent, a session with one finished turn."""
    key = (await admin_stack.key(tenant, user))["secret"]
    async with admin_stack.public(key) as api:
        kb = await api.post("/api/v1/knowledge-bases", json={"name": "kb"})
        assert kb.status_code == 201, kb.text
        doc = await api.post(
            f"/api/v1/knowledge-bases/{kb.json()['id']}/documents",
            json={"title": "notes", "content": f"{tenant} keeps the word TANGERINE."},
        )
        assert doc.status_code == 201, doc.text
        agent = await api.post("/api/v1/agents", json={"name": f"{tenant} agent"})
        assert agent.status_code == 201, agent.text
        session = await api.post("/api/v1/sessions", json={"title": "s", "agent_id": AGENT})
        sid = session.json()["id"]
        events = await read_turn(
            api, f"/api/v1/agent-chat/{sid}", api_key=key, json_body={"query": "hello there"}
        )
        assert events[-1].event == "complete"
        await _wait_for(lambda: _messages_done(api, sid))
    return {"key": key, "session": sid}


async def _sandbox_session(admin_stack: AdminStack, key: str, label: str) -> str:
    """A session whose turn wrote ``{label} was here`` in its sandbox workspace
    (checkpointed in PostgreSQL, kept on the sandbox replica's disk, claimed in Redis under
    ``weft:sandboxcall:{tenant}:{turn}:...``); its id."""
    call = {"id": f"w-{label}", "name": "write_sandbox_file",
            "arguments": {"path": "notes.txt", "content": f"{label} was here"}}  # fmt: skip
    async with (
        admin_stack.public(key) as api,
        httpx.AsyncClient(base_url=admin_stack.stack.llm_url, timeout=30) as llm,
    ):
        sid = await sandbox_session(api, "writer", ["write_sandbox_file"])
        results, _ = await scripted_turn(api, key, llm, sid, f"WRITE-{label}", [call])
    assert [r["success"] for r in results.values()] == [True], results
    return sid


def _workspace(tenant: str, session_id: str) -> Path:
    """The session's workspace directory on the admin stack's sandbox replica (named as
    ``weft_sandbox.workspace.workspace_key`` names it; the test does not import it)."""
    key = hashlib.sha256(f"{tenant}\x00{session_id}".encode()).hexdigest()[:32]
    return sandbox_root() / key


async def _messages_done(api: httpx.AsyncClient, sid: str) -> bool:
    messages = (await api.get(f"/api/v1/sessions/{sid}/messages")).json()
    return len(messages) >= 2 and all(m["status"] != "running" for m in messages)


async def _wait_for(check: Any, timeout_s: float = 60) -> None:
    async with asyncio.timeout(timeout_s):
        while True:
            if await check():
                return
            await asyncio.sleep(0.3)


async def _pg_rows(engine: AsyncEngine, tenant: str) -> dict[str, int]:
    """Rows naming ``tenant`` in every public table with a tenant column (catalog-driven,
    independent of the purge's own count)."""
    counts = {}
    async with engine.connect() as conn:
        tables = await conn.execute(
            text(
                "SELECT table_name, column_name FROM information_schema.columns "
                "WHERE table_schema = 'public' AND column_name IN "
                "('tenant_id', 'owner_tenant_id') ORDER BY 1"
            )
        )
        for table, column in tables.all():
            sql = f'SELECT count(*) FROM "{table}" WHERE {column} = :t'
            counts[table] = (await conn.execute(text(sql), {"t": tenant})).scalar_one()
        counts["tenants"] = (
            await conn.execute(text("SELECT count(*) FROM tenants WHERE id = :t"), {"t": tenant})
        ).scalar_one()
    return counts


async def _turns_recorded(engine: AsyncEngine, tenant: str, turns: int) -> None:
    """Wait until the suggestions service has recorded ``turns`` finished turns of
    ``tenant`` (it does so from ``agent.events``, after the turn's stream ended), so a
    snapshot of the tenant's rows is not taken while that consumer is still writing."""

    async def recorded() -> bool:
        sql = "SELECT count(*) FROM suggestion_turns WHERE tenant_id = :t AND status IS NOT NULL"
        async with engine.connect() as conn:
            return bool((await conn.execute(text(sql), {"t": tenant})).scalar_one() >= turns)

    await _wait_for(recorded, 30)


async def _redis_keys(redis: Redis, fragment: str) -> list[bytes]:
    return [k async for k in redis.scan_iter(match=f"*{fragment}*", count=1000)]


async def test_deleting_a_tenant_leaves_nothing_of_it_and_everything_of_others(
    admin_stack: AdminStack, engine: AsyncEngine, redis: Redis
) -> None:
    admin = admin_stack.admin
    tenant_a, tenant_b = await admin_stack.tenant(), await admin_stack.tenant()
    a = await _populate(admin_stack, tenant_a, "alice")
    b = await _populate(admin_stack, tenant_b, "bob")
    space_a = _workspace(tenant_a, await _sandbox_session(admin_stack, a["key"], tenant_a))
    space_b = _workspace(tenant_b, await _sandbox_session(admin_stack, b["key"], tenant_b))
    assert space_a.is_dir() and space_b.is_dir(), "the workspaces are not where expected"
    for tenant in (tenant_a, tenant_b):
        await _turns_recorded(engine, tenant, 2)
    rows_a, rows_b = await _pg_rows(engine, tenant_a), await _pg_rows(engine, tenant_b)
    for table in ("sessions", "messages", "knowledge_bases", "documents", "chunks",
                  "agents", "api_keys", "tenants", "sandbox_checkpoints"):  # fmt: skip
        assert rows_a[table] > 0 and rows_b[table] > 0, (table, rows_a, rows_b)
    assert await _redis_keys(redis, tenant_a) and await _redis_keys(redis, tenant_b)
    before_b = await _redis_keys(redis, tenant_b)

    started = await admin.delete(f"/admin/v1/tenants/{tenant_a}")
    assert started.status_code == 202 and started.json()["status"] == "deleting"
    residue_url = started.json()["residue_url"]

    async def gone() -> bool:
        residue = (await admin.get(residue_url)).json()
        tenant = await admin.get(f"/admin/v1/tenants/{tenant_a}")
        return bool(residue["clean"]) and tenant.status_code == 404

    await _wait_for(gone)
    assert not any((await _pg_rows(engine, tenant_a)).values()), await _pg_rows(engine, tenant_a)
    # B loses no row (its own consumers may still add some: a suggestion set, a memory).
    after_b = await _pg_rows(engine, tenant_b)
    assert {t: (n, after_b[t]) for t, n in rows_b.items() if after_b[t] < n} == {}
    # The sandbox replica drops the purged workspace within its reaper interval (1 s here).
    await _wait_for(lambda: _gone(space_a), 15)
    # With the workspace goes its entry in the sandbox's ledger of live workspace bytes
    # (a heartbeat between the purge and the reaper may have written it again).
    await _wait_for(lambda: _no_keys(redis, tenant_a), 15)
    assert await _redis_keys(redis, tenant_a) == []
    assert (space_b / "ws" / "notes.txt").read_text() == f"{tenant_b} was here"
    # B's keys survive; its running-turn set and stream slots empty (and go) as its own
    # turns and streams end, whatever A's deletion does.
    transient = (b":turns", b":sse")
    assert {k for k in before_b if not k.endswith(transient)} <= set(
        await _redis_keys(redis, tenant_b)
    )
    async with admin_stack.public(a["key"]) as api_a, admin_stack.public(b["key"]) as api_b:
        assert (await api_a.get("/api/v1/sessions")).status_code == 401
        assert (await api_b.get(f"/api/v1/sessions/{b['session']}")).status_code == 200
    # Idempotent: deleting again is accepted and stays clean.
    again = await admin.delete(f"/admin/v1/tenants/{tenant_a}")
    assert again.status_code == 202
    await _wait_for(gone)
    audit = (await admin.get("/admin/v1/audit", params={"target_id": tenant_a})).json()
    actions = [(e["action"], e["outcome"]) for e in audit]
    assert ("tenant.delete", "ok") in actions and ("tenant.purge", "ok") in actions


async def test_deleting_a_user_removes_only_that_user(
    admin_stack: AdminStack, engine: AsyncEngine, redis: Redis
) -> None:
    admin = admin_stack.admin
    tenant = await admin_stack.tenant()
    gone_user = await _populate(admin_stack, tenant, "leaver")
    kept_user = await _populate(admin_stack, tenant, "stayer")
    # A write call each, so each user's turn has a write-call claim in Redis.
    gone_turn = await _turn_of(engine, await _sandbox_session(admin_stack, gone_user["key"], "L"))
    kept_turn = await _turn_of(engine, await _sandbox_session(admin_stack, kept_user["key"], "S"))
    await _turns_recorded(engine, tenant, 4)
    assert await _redis_keys(redis, f"sandboxcall:{tenant}:{gone_turn}:")
    resp = await admin.delete(f"/admin/v1/tenants/{tenant}/users/leaver")
    assert resp.status_code == 200, resp.text
    report = resp.json()
    assert report["clean"], report
    assert report["report"]["deleted_rows"]["messages"] >= 2
    async with engine.connect() as conn:
        for table in ("sessions", "messages", "api_keys", "memories", "suggestion_turns"):
            column = "user_id" if table != "messages" else "session_id"
            value = "leaver" if table != "messages" else gone_user["session"]
            sql = f"SELECT count(*) FROM {table} WHERE tenant_id = :t AND {column} = :v"
            left = (await conn.execute(text(sql), {"t": tenant, "v": value})).scalar_one()
            assert left == 0, table
    assert await _redis_keys(redis, gone_user["session"]) == []
    assert await _redis_keys(redis, kept_user["session"]) != []
    assert await _redis_keys(redis, f"sandboxcall:{tenant}:{gone_turn}:") == []
    assert await _redis_keys(redis, f"sandboxcall:{tenant}:{kept_turn}:") != []
    residue = (await admin.get(f"/admin/v1/tenants/{tenant}/users/leaver/residue")).json()
    assert residue["clean"], residue
    async with admin_stack.public(kept_user["key"]) as api:
        assert (await api.get(f"/api/v1/sessions/{kept_user['session']}")).status_code == 200
        assert (await api.get("/api/v1/knowledge-bases")).json() != []
    async with admin_stack.public(gone_user["key"]) as api:
        await _wait_for(lambda: _is(api.get("/api/v1/sessions"), 401), 15)


async def _turn_of(engine: AsyncEngine, session_id: str) -> str:
    """The id of the session's one turn (once its messages are stored)."""
    sql = "SELECT DISTINCT request_id FROM messages WHERE session_id = :s"
    turns: list[str] = []

    async def stored() -> bool:
        async with engine.connect() as conn:
            turns[:] = (await conn.execute(text(sql), {"s": session_id})).scalars().all()
        return bool(turns)

    await _wait_for(stored, 15)
    (turn,) = turns
    return str(turn)


async def _no_keys(redis: Redis, tenant: str) -> bool:
    return not await _redis_keys(redis, tenant)


async def _gone(path: Path) -> bool:
    return not await asyncio.to_thread(path.exists)


async def _is(call: Any, status: int) -> bool:
    return bool((await call).status_code == status)


async def test_retention_deletes_old_messages_and_streams(
    admin_stack: AdminStack, engine: AsyncEngine, redis: Redis
) -> None:
    admin = admin_stack.admin
    tenant = await admin_stack.tenant()
    other = await admin_stack.tenant()
    kept = await _populate(admin_stack, other, "u")
    data = await _populate(admin_stack, tenant, "u")
    assert await _redis_keys(redis, f"stream:{tenant}:")
    # About one second: the next maintenance run (every second here) applies it.
    settings = {"retention": {"messages_days": 1 / 86400, "streams_days": 1 / 86400}}
    patched = await admin.patch(f"/admin/v1/tenants/{tenant}", json={"settings": settings})
    assert patched.status_code == 200, patched.text

    async def applied() -> bool:
        async with engine.connect() as conn:
            left = (
                await conn.execute(
                    text("SELECT count(*) FROM messages WHERE tenant_id = :t"), {"t": tenant}
                )
            ).scalar_one()
        return left == 0 and not await _redis_keys(redis, f"stream:{tenant}:")

    await _wait_for(applied, 30)
    async with admin_stack.public(data["key"]) as api:
        assert (await api.get(f"/api/v1/sessions/{data['session']}")).status_code == 200
    async with engine.connect() as conn:
        others = (
            await conn.execute(
                text("SELECT count(*) FROM messages WHERE session_id = :s"), {"s": kept["session"]}
            )
        ).scalar_one()
    assert others >= 2


async def test_late_writes_of_a_deleted_tenant_are_purged_and_its_id_stays_taken(
    admin_stack: AdminStack, engine: AsyncEngine, redis: Redis
) -> None:
    """A record of a deleted tenant that a consumer handles after the purge (a lagging
    replica, a redelivery) writes a row or a stream again: the maintenance job purges it
    within the watch, leaves a tenant that has a row alone, and refuses the id meanwhile."""
    admin = admin_stack.admin
    gone_id, live_id = await admin_stack.tenant(), await admin_stack.tenant()
    live_key = (await admin_stack.key(live_id, "u"))["secret"]
    async with admin_stack.public(live_key) as api:
        made = await api.post("/api/v1/sessions", json={"title": "s", "agent_id": AGENT})
        assert made.status_code == 201, made.text
    started = await admin.delete(f"/admin/v1/tenants/{gone_id}")
    assert started.status_code == 202, started.text
    await _wait_for(lambda: _is(admin.get(f"/admin/v1/tenants/{gone_id}"), 404), 30)

    again = await admin.post("/admin/v1/tenants", json={"id": gone_id, "name": "again"})
    assert again.status_code == 409 and "deleted recently" in again.text, again.text

    # The live tenant as the audit log would show an id purged, then given a row again
    # (the development tenant, re-created at a gateway's start): the job must not purge it.
    live_rows = await _pg_rows(engine, live_id)
    sql = (
        "INSERT INTO admin_audit (actor, action, target_type, target_id, outcome) "
        "VALUES ('test', 'tenant.purge', 'tenant', :t, 'ok')"
    )
    await redis.xadd(f"weft:stream:{gone_id}:late-session", {"event": "final_answer"})
    async with engine.begin() as conn:
        await conn.execute(text(sql), {"t": live_id})
    await _late_memory(engine, gone_id, 1)

    async def late_writes_gone() -> bool:
        left = await _pg_rows(engine, gone_id)
        return not any(left.values()) and not await _redis_keys(redis, gone_id)

    params = {"action": "tenant.purge", "target_id": gone_id, "actor": "system:maintenance"}

    async def purged_by_the_job(times: int) -> bool:
        entries = (await admin.get("/admin/v1/audit", params=params)).json()
        late = [e for e in entries if e["detail"]["deleted_rows"].get("memories") == 1]
        return len(late) >= times

    await _wait_for(late_writes_gone, 30)
    await _wait_for(lambda: purged_by_the_job(1), 15)  # recorded after the rows went
    # A second late write, purged by a later run: the run that purged the first one has
    # then gone through every watched tenant, the live one included (one gateway here,
    # whose runs follow one another).
    await _late_memory(engine, gone_id, 2)
    await _wait_for(late_writes_gone, 30)
    await _wait_for(lambda: purged_by_the_job(2), 15)
    assert await _pg_rows(engine, live_id) == live_rows
    async with admin_stack.public(live_key) as api:
        assert (await api.get(f"/api/v1/sessions/{made.json()['id']}")).status_code == 200


async def _late_memory(engine: AsyncEngine, tenant: str, n: int) -> None:
    """A memory row of ``tenant`` written as a consumer handling a late record would."""
    sql = "INSERT INTO memories (id, tenant_id, user_id, content) VALUES (:i, :t, 'u', 'x')"
    async with engine.begin() as conn:
        await conn.execute(text(sql), {"i": f"late-{n}-{tenant}", "t": tenant})
