"""memory's ``/internal/turns/unfinished`` on the real PostgreSQL: the turns whose assistant
row is still running, oldest first, after a time, paged (what the engine's TurnAuditor
reads every few seconds)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from weft_storage.memory.models import Message

from tests.integration.history_rows import drop_sessions, seed_running_turns, turns_api


@pytest.fixture
async def memory(
    sessions: async_sessionmaker[AsyncSession],
) -> AsyncIterator[httpx.AsyncClient]:
    async with turns_api(sessions) as client:
        yield client


@pytest.fixture
async def seeded(sessions: async_sessionmaker[AsyncSession]) -> AsyncIterator[list[str]]:
    """Session ids to delete after the test (``drop_sessions``)."""
    ids: list[str] = []
    yield ids
    await drop_sessions(sessions, ids)


async def test_lists_running_turns_after_a_time_oldest_first_in_pages(
    memory: httpx.AsyncClient, sessions: async_sessionmaker[AsyncSession], seeded: list[str]
) -> None:
    # After every row there is (other tests' too), so that only this test's rows count.
    async with sessions() as s:
        latest = await s.scalar(select(func.max(Message.created_at)))
    start = max(latest or datetime.now(UTC), datetime.now(UTC)) + timedelta(days=1)
    statuses = ["completed", "running", "failed", "running", "cancelled", "running"]
    tenant, sid, rids = await seed_running_turns(sessions, statuses, start)
    seeded.append(sid)
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
