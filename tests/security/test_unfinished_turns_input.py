"""memory's ``/internal/turns/unfinished`` refuses bad input with 422 (never a 500), and its
errors carry nothing of any tenant's turns.

The route spans tenants by design (the engine audits every turn); like every ``/internal``
route it trusts its network position until services authenticate each other, which is
tracked separately (ARCHITECTURE invariant 5).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from tests.integration.history_rows import drop_sessions, seed_running_turns, turns_api

BAD_QUERIES = [
    {},  # started_after is required
    {"started_after": "yesterday"},
    {"started_after": "2026-01-01T00:00:00"},  # naive: whose midnight?
    {"started_after": "2026-13-01T00:00:00Z"},
    {"started_after": "'; DROP TABLE messages; --"},
    {"started_after": "2026-01-01T00:00:00Z", "limit": "0"},
    {"started_after": "2026-01-01T00:00:00Z", "limit": "1001"},
    {"started_after": "2026-01-01T00:00:00Z", "limit": "-5"},
    {"started_after": "2026-01-01T00:00:00Z", "limit": "ten"},
    {"started_after": "2026-01-01T00:00:00Z", "limit": "9" * 40},
    {"started_after": "9" * 400},
]


@pytest.fixture
async def memory(
    sessions: async_sessionmaker[AsyncSession],
) -> AsyncIterator[httpx.AsyncClient]:
    async with turns_api(sessions, raise_app_exceptions=False) as client:
        yield client


@pytest.mark.parametrize("params", BAD_QUERIES, ids=[str(i) for i in range(len(BAD_QUERIES))])
async def test_bad_input_is_a_422_that_names_no_turn(
    memory: httpx.AsyncClient, sessions: async_sessionmaker[AsyncSession], params: dict[str, str]
) -> None:
    start = datetime.now(UTC) - timedelta(minutes=1)
    tenant, sid, rids = await seed_running_turns(sessions, ["running"], start)
    try:
        resp = await memory.get("/internal/turns/unfinished", params=params)
    finally:
        await drop_sessions(sessions, [sid])
    assert resp.status_code == 422, resp.text
    assert tenant not in resp.text and rids[0] not in resp.text
    assert "Traceback" not in resp.text and "sqlalchemy" not in resp.text.lower()
