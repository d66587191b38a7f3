"""History reload and checkpoints on the real PostgreSQL (SPEC M-07, M-08)."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import insert
from sqlalchemy.ext.asyncio import (
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
)
from weft_context.summary import summary_text
from weft_memory.api import session_router
from weft_memory.history_api import history_router
from weft_storage.models import Message


@pytest.fixture
def sessions(engine: AsyncEngine) -> async_sessionmaker[AsyncSession]:
    return async_sessionmaker(engine, expire_on_commit=False)


@pytest.fixture
async def client(sessions: async_sessionmaker[AsyncSession]) -> AsyncIterator[httpx.AsyncClient]:
    app = FastAPI()
    app.include_router(session_router(sessions))
    app.include_router(history_router(sessions))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://memory") as c:
        yield c


async def _seed(
    client: httpx.AsyncClient, sessions: async_sessionmaker[AsyncSession], turns: int
) -> tuple[str, str]:
    tenant = f"t-{secrets.token_hex(4)}"
    resp = await client.post("/internal/sessions", json={"tenant_id": tenant, "user_id": "u"})
    sid = resp.json()["id"]
    base, tag = datetime(2026, 1, 1, tzinfo=UTC), secrets.token_hex(4)
    rows: list[dict[str, Any]] = []
    for i in range(turns):
        at = base + timedelta(seconds=i)
        common = {"tenant_id": tenant, "session_id": sid, "request_id": f"{tag}-r{i:05d}",
                  "is_completed": True, "status": "completed", "agent_steps": []}  # fmt: skip
        rows.append({**common, "id": f"{tag}u{i:05d}", "role": "user",
                     "content": f"question {i}", "created_at": at})  # fmt: skip
        done = at + timedelta(microseconds=1)
        rows.append({**common, "id": f"{tag}a{i:05d}", "role": "assistant",
                     "content": f"answer {i}", "created_at": done})  # fmt: skip
    async with sessions.begin() as s:
        for start in range(0, len(rows), 1000):
            await s.execute(insert(Message), rows[start : start + 1000])
    return tenant, sid


async def test_five_thousand_rows_reload_under_budget(
    client: httpx.AsyncClient, sessions: async_sessionmaker[AsyncSession]
) -> None:
    # SPEC M-08: reverse pagination, 200 a page, max 5000 rows.
    tenant, sid = await _seed(client, sessions, 2600)  # 5200 rows: more than the cap
    url = f"/internal/sessions/{sid}/history"
    full = await client.get(url, params={"tenant_id": tenant, "token_budget": 1_000_000})
    body = full.json()
    assert len(body["turns"]) == 2500  # 5000 rows read at most
    assert body["messages"][-1] == {"role": "assistant", "content": "answer 2599"}
    assert body["turns"][0]["request_id"].endswith("r00100")
    small = (await client.get(url, params={"tenant_id": tenant, "token_budget": 500})).json()
    assert 0 < len(small["turns"]) < 50 and small["tokens"] <= 500
    legacy = (await client.get(url, params={"tenant_id": tenant})).json()
    assert len(legacy["turns"]) == 5  # max_turns defaults to 5 without a budget
    foreign = await client.get(url, params={"tenant_id": "other"})
    assert foreign.status_code == 404


async def test_history_starts_from_latest_checkpoint(
    client: httpx.AsyncClient, sessions: async_sessionmaker[AsyncSession]
) -> None:
    # SPEC M-07/M-08: the checkpoint turn and older become the leading summary.
    tenant, sid = await _seed(client, sessions, 10)
    turns = (
        await client.get(
            f"/internal/sessions/{sid}/history", params={"tenant_id": tenant, "max_turns": 10}
        )
    ).json()["turns"]
    ctx = f"/internal/sessions/{sid}/turns/{{}}/context"
    first = await client.put(
        ctx.format(turns[3]["turn_id"]), params={"tenant_id": tenant},
        json={"summary": "S1", "tokens_before": 900, "tokens_after": 100},
    )  # fmt: skip
    assert first.status_code == 204
    second = await client.put(
        ctx.format(turns[6]["request_id"]), params={"tenant_id": tenant},
        json={"summary": "S2 merges S1", "degraded": True, "token_scale": 0.8},
    )  # fmt: skip
    assert second.status_code == 204
    body = (
        await client.get(
            f"/internal/sessions/{sid}/history",
            params={"tenant_id": tenant, "token_budget": 100_000},
        )
    ).json()
    assert body["summary"] == "S2 merges S1"
    assert body["checkpoint_turn_id"] == turns[6]["turn_id"]
    assert summary_text(body["messages"][0]) == "S2 merges S1"
    assert [t["request_id"] for t in body["turns"]] == [t["request_id"] for t in turns[7:]]
    assert body["turns"][0]["start"] == 1
    assert body["token_scale"] == 0.8
    missing = await client.put(
        ctx.format("nope"), params={"tenant_id": tenant}, json={"summary": "x"}
    )
    assert missing.status_code == 404
    foreign = await client.put(
        ctx.format(turns[3]["turn_id"]), params={"tenant_id": "other"}, json={"summary": "x"}
    )
    assert foreign.status_code == 404
    empty = await client.put(ctx.format(turns[3]["turn_id"]), params={"tenant_id": tenant}, json={})
    assert empty.status_code == 422
