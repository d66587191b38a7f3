"""Token budgets and metering through the whole stack (docs/budgets.md).

The limits stack gives every tenant 5,000 tokens a minute. A scripted model round that
reports 5,500 tokens crosses it: that round finishes (its tool call runs), the turn's
next model call is not made (``budget_exceeded``), and the tenant's next turn is 429
with the budget, its limit and its reset, while another tenant's turn runs. memory's
``usage`` rows carry the scripted model's tokens in and out, the turn's tool calls and
the bytes of ingested documents, read through ``GET /internal/usage``; the same events
recorded twice count once."""

from __future__ import annotations

import asyncio
import secrets
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from weft_contracts import (
    CompleteData,
    CompleteEvent,
    TurnStartedData,
    TurnStartedEvent,
    TurnStatus,
    TurnUsage,
)
from weft_memory.recorder import MessageRecorder
from weft_storage.memory.models_usage import UsageRecord
from weft_storage.memory.usage import usage_totals
from weft_testkit import LocalStack, SseEvent, chat_requests, read_turn

from tests.stack_fixtures import ApiKeys, KeyedClient

pytestmark = pytest.mark.kafka

THINK = {
    "name": "thinking",
    "arguments": {"thought": "step", "next_thought_needed": True, "thought_number": 1,
                  "total_thoughts": 3},
}  # fmt: skip
EXPENSIVE = {"prompt_tokens": 4000, "completion_tokens": 1500}
"""One round over the stack's 5,000 tokens a minute."""


async def _early_in_a_minute() -> None:
    """The budget window is the UTC minute: start where a turn cannot straddle two."""
    if time.time() % 60 > 40:
        await asyncio.sleep(61 - time.time() % 60)


async def _session(client: KeyedClient, tools: list[str]) -> str:
    body = {"name": "budget", "kb_selection_mode": "none", "allowed_tools": tools}
    agent = await client.http.post("/api/v1/agents", json=body)
    assert agent.status_code == 201, agent.text
    session = await client.http.post("/api/v1/sessions", json={"agent_id": agent.json()["id"]})
    assert session.status_code == 201, session.text
    return str(session.json()["id"])


async def _turn(client: KeyedClient, session_id: str, query: str) -> list[SseEvent]:
    return await read_turn(
        client.http, f"/api/v1/agent-chat/{session_id}", api_key=client.key,
        json_body={"query": query},
    )  # fmt: skip


async def _usage(stack: LocalStack, tenant: str, group_by: str) -> list[dict[str, Any]]:
    """memory's usage totals of ``tenant``, polled until every entry has its tokens or
    bytes (a turn's row exists from ``turn_started``, its totals come with ``complete``)."""
    now = datetime.now(UTC)
    query = {
        "tenant_id": tenant, "group_by": group_by,
        "from": (now - timedelta(hours=1)).isoformat(),
        "to": (now + timedelta(hours=1)).isoformat(),
    }  # fmt: skip
    deadline = time.monotonic() + 30
    async with stack.internal_client("memory") as memory:
        while True:
            resp = await memory.get("/internal/usage", params=query)
            assert resp.status_code == 200, resp.text
            totals: list[dict[str, Any]] = resp.json()["totals"]
            if totals and all(t["input_tokens"] or t["ingestion_bytes"] for t in totals):
                return totals
            assert time.monotonic() < deadline, f"usage of {tenant} not recorded: {totals}"
            await asyncio.sleep(0.3)


async def test_over_the_minute_budget_a_tenant_gets_429_and_others_go_on(
    limits_stack: LocalStack, limits_keys: ApiKeys, limits_llm: httpx.AsyncClient
) -> None:
    await _early_in_a_minute()
    tenant_a, tenant_b = f"budget-a-{secrets.token_hex(3)}", f"budget-b-{secrets.token_hex(3)}"
    a = await limits_keys.client(tenant=tenant_a, user="alice")
    b = await limits_keys.client(tenant=tenant_b, user="bob")
    await limits_llm.post("/_script", json={"steps": [
        {"match": "EXPENSIVE", "tool_calls": [THINK], "usage": EXPENSIVE},
        {"match": "CHEAP", "content": "Cheap answer.",
         "usage": {"prompt_tokens": 30, "completion_tokens": 5}},
    ]})  # fmt: skip
    session_a = await _session(a, ["thinking"])

    events = await _turn(a, session_a, "EXPENSIVE question")
    # The round that crossed the budget ran to its end: its tool call ran ...
    assert [e.event for e in events].count("tool_result") == 1
    [error] = [e.data["data"] for e in events if e.event == "error"]
    # ... and the next round's model call was not made.
    assert error["code"] == "budget_exceeded" and error["retryable"] is True
    assert "tokens per minute" in error["message"]
    assert events[-1].data["data"]["status"] == "failed"
    assert len(await chat_requests(limits_llm)) == 1

    refused = await a.http.post(f"/api/v1/agent-chat/{session_a}", json={"query": "CHEAP again"})
    assert refused.status_code == 429, refused.text
    reason = refused.json()["detail"]
    assert reason["code"] == "budget_exceeded" and reason["budget"] == "tokens_per_minute"
    assert (reason["limit"], reason["used"]) == (5000, 5500)
    retry = int(refused.headers["Retry-After"])
    assert 1 <= retry <= 60 and reason["retry_after_s"] == retry
    assert datetime.fromisoformat(reason["resets_at"]) > datetime.now(UTC)

    other = await _turn(b, await _session(b, []), "CHEAP question")
    assert other[-1].data["data"]["status"] == "completed"

    [by_agent] = await _usage(limits_stack, tenant_a, "agent")
    assert (by_agent["input_tokens"], by_agent["output_tokens"]) == (4000, 1500)
    assert (by_agent["llm_calls"], by_agent["tool_calls"], by_agent["turns"]) == (1, 1, 1)
    [by_user] = await _usage(limits_stack, tenant_a, "user")
    assert by_user["key"] == "alice"
    [b_usage] = await _usage(limits_stack, tenant_b, "user")
    assert (b_usage["key"], b_usage["input_tokens"], b_usage["output_tokens"]) == ("bob", 30, 5)


async def test_ingested_bytes_are_metered_per_user(
    limits_stack: LocalStack, limits_keys: ApiKeys
) -> None:
    tenant = f"ingest-{secrets.token_hex(3)}"
    carol = await limits_keys.client(tenant=tenant, user="carol")
    kb = await carol.http.post("/api/v1/knowledge-bases", json={"name": "metered"})
    assert kb.status_code == 201, kb.text
    kb_id = kb.json()["id"]
    text = "Refunds take five days. " * 50  # 1,200 bytes
    added = await carol.http.post(
        f"/api/v1/knowledge-bases/{kb_id}/documents", json={"title": "t", "content": text}
    )
    assert added.status_code == 201, added.text
    upload = b"name,amount\n" + b"x,1\n" * 100  # 412 bytes
    files = {"file": ("sheet.csv", upload, "text/csv")}
    sent = await carol.http.post(f"/api/v1/knowledge-bases/{kb_id}/files", files=files)
    assert sent.status_code == 202, sent.text

    [usage] = await _usage(limits_stack, tenant, "user")
    assert usage["key"] == "carol"
    assert usage["ingestion_bytes"] == len(text.encode()) + len(upload)
    assert (usage["documents"], usage["turns"], usage["input_tokens"]) == (2, 0, 0)


async def test_redelivered_events_do_not_count_twice(
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    """At-least-once delivery: ``turn_started`` and ``complete`` handled again (in any
    order after the first) leave the turn's one row with the turn's totals."""
    tenant, request_id = f"redeliver-{secrets.token_hex(3)}", f"req_{secrets.token_hex(6)}"
    ids = {"tenant_id": tenant, "session_id": f"ses_{secrets.token_hex(4)}",
           "request_id": request_id}  # fmt: skip
    started = TurnStartedEvent(
        **ids, data=TurnStartedData(query="q", user_id="dora", agent_id="agent-1")
    )
    usage = TurnUsage(input_tokens=700, output_tokens=80, llm_calls=2, tool_calls=3)
    complete = CompleteEvent(**ids, data=CompleteData(status=TurnStatus.COMPLETED, usage=usage))
    recorder = MessageRecorder(sessions)
    for event in (started, complete, complete, started, complete):
        await recorder.handle(event)

    async with sessions() as s:
        rows = (await s.scalars(select(UsageRecord).where(UsageRecord.tenant_id == tenant))).all()
    assert len(rows) == 1
    row = rows[0]
    assert (row.user_id, row.agent_id) == ("dora", "agent-1")
    assert (row.input_tokens, row.output_tokens, row.llm_calls, row.tool_calls) == (700, 80, 2, 3)
    now = datetime.now(UTC)
    [totals] = await usage_totals(
        sessions, tenant, now - timedelta(hours=1), now + timedelta(hours=1), "agent"
    )
    assert (totals.key, totals.input_tokens, totals.turns) == ("agent-1", 700, 1)


@pytest.mark.parametrize(
    ("params", "status"),
    [
        ({"group_by": "tenant"}, 422),
        ({"from": "2026-01-02T00:00:00+00:00", "to": "2026-01-01T00:00:00+00:00"}, 422),
        ({"from": "2020-01-01T00:00:00+00:00", "to": "2026-01-01T00:00:00+00:00"}, 422),
        ({"from": "2026-01-01T00:00:00", "to": "2026-01-02T00:00:00"}, 422),  # no zone
        ({"tenant_id": ""}, 422),
        ({"tenant_id": "x" * 200}, 422),
    ],
    ids=["bad-group", "reversed", "too-long", "naive-times", "empty-tenant", "huge-tenant"],
)
async def test_the_usage_route_refuses_bad_queries(
    limits_stack: LocalStack, params: dict[str, str], status: int
) -> None:
    query = {
        "tenant_id": "t", "group_by": "user",
        "from": "2026-01-01T00:00:00+00:00", "to": "2026-01-02T00:00:00+00:00", **params,
    }  # fmt: skip
    async with limits_stack.internal_client("memory") as memory:
        resp = await memory.get("/internal/usage", params=query)
    assert resp.status_code == status, resp.text


async def test_the_usage_route_wants_an_operator_credential(limits_stack: LocalStack) -> None:
    """A tenant's request credential (what a turn's records carry) never reads usage,
    not even its own tenant's; nor does a service credential of another scope."""
    keys = limits_stack.credentials
    query = {"tenant_id": "t", "from": "2026-01-01T00:00:00+00:00",
             "to": "2026-01-02T00:00:00+00:00"}  # fmt: skip
    tenant_token = keys.request("t", "u")
    wrong_scope = keys.operator.service("memory", ["memory:turns.read"])
    async with httpx.AsyncClient(base_url=limits_stack.url("memory"), timeout=30) as memory:
        for token, status in ((tenant_token, 401), (wrong_scope, 403), (None, 401)):
            headers = {"Authorization": f"Bearer {token}"} if token else {}
            resp = await memory.get("/internal/usage", params=query, headers=headers)
            assert resp.status_code == status, (token, resp.text)
