"""memory's ``/internal/turns/unfinished`` on the real PostgreSQL: the turns whose assistant
row is still running, oldest first, after a time, paged (what the engine's TurnAuditor
reads every few seconds)."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import insert
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from weft_memory.turns_api import turns_router
from weft_storage.models import ChatSession, Message


@pytest.fixture
async def memory(
    sessions: async_sessionmaker[AsyncSession],
) -> AsyncIterator[httpx.AsyncClient]:
    app = FastAPI()
    app.include_router(turns_router(sessions))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://memory") as c:
        yield c


async def seed_turns(
    sessions: async_sessionmaker[AsyncSession], statuses: list[str], start: datetime
) -> tuple[str, list[str]]:
    """A new tenant's session with one turn per status (user row completed, assistant row
    with that status), one second apart from ``start``; (tenant id, request ids)."""
    tenant, sid = f"t-{secrets.token_hex(4)}", f"ses_{secrets.token_hex(6)}"
    async with sessions.begin() as s:
        s.add(ChatSession(id=sid, tenant_id=tenant, user_id="u"))
    rows, rids = [], []
    for i, status in enumerate(statuses):
        rid = f"{sid}-r{i}"
        rids.append(rid)
        at = start + timedelta(seconds=i)
        common = {"tenant_id": tenant, "session_id": sid, "request_id": rid, "agent_steps": []}
        rows.append({**common, "id": f"{sid[-8:]}u{i}", "role": "user", "content": "q",
                     "status": "completed", "is_completed": True, "created_at": at})  # fmt: skip
        rows.append({**common, "id": f"{sid[-8:]}a{i}", "role": "assistant", "content": "",
                     "status": status, "is_completed": status == "completed",
                     "created_at": at + timedelta(microseconds=1)})  # fmt: skip
    async with sessions.begin() as s:
        await s.execute(insert(Message), rows)
    return tenant, rids


async def test_lists_running_turns_after_a_time_oldest_first_in_pages(
    memory: httpx.AsyncClient, sessions: async_sessionmaker[AsyncSession]
) -> None:
    # A start in the future of every other test's rows, so that only this test's count.
    start = datetime.now(UTC) + timedelta(days=3650 + secrets.randbelow(10_000))
    statuses = ["completed", "running", "failed", "running", "cancelled", "running"]
    tenant, rids = await seed_turns(sessions, statuses, start)
    after = start - timedelta(seconds=1)
    resp = await memory.get(
        "/internal/turns/unfinished", params={"started_after": after.isoformat(), "limit": 2}
    )
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert [t["request_id"] for t in body["turns"]] == [rids[1], rids[3]] and body["more"]
    assert {t["tenant_id"] for t in body["turns"]} == {tenant}
    last = datetime.fromisoformat(body["turns"][-1]["started_at"])
    rest = (await memory.get(
        "/internal/turns/unfinished", params={"started_after": last.isoformat(), "limit": 2}
    )).json()  # fmt: skip
    assert [t["request_id"] for t in rest["turns"]] == [rids[5]] and not rest["more"]
