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
from weft_storage.memory.models import Message
from weft_testkit.credentials import trusted

from tests.workspaces_kit import sandbox_workspaces


@pytest.fixture
def sessions(engine: AsyncEngine) -> async_sessionmaker[AsyncSession]:
    return async_sessionmaker(engine, expire_on_commit=False)


@pytest.fixture
async def client(sessions: async_sessionmaker[AsyncSession]) -> AsyncIterator[httpx.AsyncClient]:
    app = FastAPI()
    app.include_router(session_router(sessions, sandbox_workspaces(sessions)))
    app.include_router(history_router(sessions))
    transport = trusted(app)
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


async def _history(client: httpx.AsyncClient, tenant: str, sid: str) -> dict[str, Any]:
    resp = await client.get(
        f"/internal/sessions/{sid}/history", params={"tenant_id": tenant, "token_budget": 100_000}
    )
    assert resp.status_code == 200, resp.text
    body: dict[str, Any] = resp.json()
    return body


async def test_deleting_messages_invalidates_the_checkpoints_that_cover_them(
    client: httpx.AsyncClient, sessions: async_sessionmaker[AsyncSession]
) -> None:
    # SPEC M-07: "rollback/delete invalidates"; M-08 falls back to an earlier checkpoint.
    tenant, sid = await _seed(client, sessions, 10)
    turns = (await _history(client, tenant, sid))["turns"]
    ctx = f"/internal/sessions/{sid}/turns/{{}}/context"
    for turn, summary in ((turns[3], "S1"), (turns[6], "S2")):
        put = await client.put(
            ctx.format(turn["turn_id"]), params={"tenant_id": tenant}, json={"summary": summary}
        )
        assert put.status_code == 204
    assert (await _history(client, tenant, sid))["summary"] == "S2"
    messages = f"/internal/sessions/{sid}/messages"
    # _seed names rows <8 hex tag><"u"|"a"><index>.
    user_of = {t["request_id"]: f"{t['turn_id'][:8]}u{t['turn_id'][9:]}" for t in turns}

    # Delete turn 5 (by its user message): S2 on turn 6 summarises it and must go.
    deleted = await client.delete(
        f"{messages}/{user_of[turns[5]['request_id']]}",
        params={"tenant_id": tenant, "user_id": "u"},
    )
    assert deleted.status_code == 204
    body = await _history(client, tenant, sid)
    assert body["summary"] == "S1" and body["checkpoint_turn_id"] == turns[3]["turn_id"]
    assert [t["request_id"] for t in body["turns"]] == [
        turns[i]["request_id"] for i in (4, 6, 7, 8, 9)
    ]

    # Rollback from turn 8: later rows go, the older checkpoint S1 stays valid.
    rolled = await client.delete(
        messages, params={"tenant_id": tenant, "user_id": "u", "from": turns[8]["turn_id"]}
    )
    assert rolled.status_code == 204
    body = await _history(client, tenant, sid)
    assert body["summary"] == "S1"
    assert [t["request_id"] for t in body["turns"]] == [turns[i]["request_id"] for i in (4, 6, 7)]

    # Delete turn 1: S1 covers it; no valid checkpoint is left, history starts at turn 0.
    assert (
        await client.delete(
            f"{messages}/{turns[1]['turn_id']}", params={"tenant_id": tenant, "user_id": "u"}
        )
    ).status_code == 204
    body = await _history(client, tenant, sid)
    assert body["summary"] is None and body["checkpoint_turn_id"] is None
    assert [t["request_id"] for t in body["turns"]] == [
        turns[i]["request_id"] for i in (0, 2, 3, 4, 6, 7)
    ]

    for url, params in (
        (f"{messages}/nope", {"tenant_id": tenant, "user_id": "u"}),
        (messages, {"tenant_id": tenant, "user_id": "u", "from": "nope"}),
        (f"{messages}/{turns[0]['turn_id']}", {"tenant_id": "other", "user_id": "u"}),
    ):
        assert (await client.delete(url, params=params)).status_code == 404
