"""Usage and budgets through the admin API (docs/admin.md, docs/budgets.md).

An operator reads a tenant's metered usage per user or agent and sets its token budgets;
a tenant key reaches neither, and hostile queries and bodies are 422. Runs on the admin
stack (real Kafka, PostgreSQL, Redis; the scripted model reports each call's usage).
"""

from __future__ import annotations

import asyncio
import secrets
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
from weft_testkit import read_turn

from tests.security.admin_fixtures import AdminStack


async def _turn(client: httpx.AsyncClient, key: str, query: str) -> str:
    """One completed turn of a fresh session on a tool-less agent; the session id."""
    agent = await client.post(
        "/api/v1/agents", json={"name": "metered", "kb_selection_mode": "none",
                                "allowed_tools": []},
    )  # fmt: skip
    assert agent.status_code == 201, agent.text
    session = await client.post("/api/v1/sessions", json={"agent_id": agent.json()["id"]})
    assert session.status_code == 201, session.text
    session_id = str(session.json()["id"])
    events = await read_turn(
        client, f"/api/v1/agent-chat/{session_id}", api_key=key, json_body={"query": query}
    )
    assert events[-1].data["data"]["status"] == "completed", events[-1].data
    return session_id


async def _usage(admin: httpx.AsyncClient, tenant: str) -> list[dict[str, Any]]:
    """The tenant's usage per user, polled until its turn's totals are in."""
    deadline = time.monotonic() + 30
    while True:
        resp = await admin.get(f"/admin/v1/tenants/{tenant}/usage", params={"group_by": "user"})
        assert resp.status_code == 200, resp.text
        body = resp.json()
        assert body["tenant_id"] == tenant and body["group_by"] == "user", body
        items: list[dict[str, Any]] = body["items"]
        if items and all(i["input_tokens"] for i in items):
            return items
        assert time.monotonic() < deadline, f"usage of {tenant} never recorded: {body}"
        await asyncio.sleep(0.3)


async def test_an_operator_reads_usage_and_sets_a_budget_that_then_holds(
    admin_stack: AdminStack,
) -> None:
    if time.time() % 60 > 40:  # the minute budget: do not straddle two windows
        await asyncio.sleep(61 - time.time() % 60)
    tag = secrets.token_hex(3)
    async with httpx.AsyncClient(base_url=admin_stack.stack.llm_url, timeout=30) as llm:
        await llm.post("/_script", json={"steps": [
            {"match": f"METER {tag}", "content": "Metered.",
             "usage": {"prompt_tokens": 700, "completion_tokens": 80}},
        ]})  # fmt: skip
        tenant, other = await admin_stack.tenant(), await admin_stack.tenant()
        key = (await admin_stack.key(tenant, "carol"))["secret"]
        async with admin_stack.public(key) as carol:
            session_id = await _turn(carol, key, f"METER {tag} please")

            [usage] = await _usage(admin_stack.admin, tenant)
            assert usage["key"] == "carol"
            assert (usage["input_tokens"], usage["output_tokens"], usage["turns"]) == (700, 80, 1)
            resp = await admin_stack.admin.get(f"/admin/v1/tenants/{other}/usage")
            assert resp.status_code == 200 and resp.json()["items"] == [], resp.text

            budget = {"tokens_per_minute": 500, "tokens_per_day": None}
            resp = await admin_stack.admin.put(f"/admin/v1/tenants/{tenant}/budget", json=budget)
            assert resp.status_code == 200, resp.text
            read = await admin_stack.admin.get(f"/admin/v1/tenants/{tenant}/budget")
            assert read.json() == budget

            deadline = time.monotonic() + 20  # the budget cache is 1 s on this stack
            while True:
                refused = await carol.post(
                    f"/api/v1/agent-chat/{session_id}", json={"query": f"METER {tag} again"}
                )
                if refused.status_code == 429:
                    break
                assert time.monotonic() < deadline, refused.status_code
                await asyncio.sleep(0.5)
            reason = refused.json()["detail"]
            assert (reason["budget"], reason["limit"]) == ("tokens_per_minute", 500), reason
        await llm.post("/_reset")

    audit = await admin_stack.admin.get("/admin/v1/audit", params={"action": "budget.set"})
    assert audit.status_code == 200, audit.text
    assert any(e["target_id"] == tenant and e["outcome"] == "ok" for e in audit.json()), audit.text


async def test_usage_and_budget_routes_refuse_tenant_keys_and_hostile_input(
    admin_stack: AdminStack,
) -> None:
    tenant = await admin_stack.tenant()
    key = (await admin_stack.key(tenant))["secret"]
    async with admin_stack.public(key) as tenant_client:
        for method, path in (("GET", "usage"), ("GET", "budget"), ("PUT", "budget")):
            resp = await tenant_client.request(
                method, f"/admin/v1/tenants/{tenant}/{path}", json={"tokens_per_minute": 0}
            )
            assert resp.status_code == 403, (path, resp.status_code, resp.text)
    now = datetime.now(UTC)
    bad_queries: list[dict[str, str]] = [
        {"from": now.isoformat(), "to": (now - timedelta(hours=1)).isoformat()},
        {"from": "2026-01-01T00:00:00", "to": "2026-01-02T00:00:00"},  # no time zone
        {"from": (now - timedelta(days=400)).isoformat(), "to": now.isoformat()},
        {"group_by": "session"},
        {"from": "yesterday"},
    ]
    for params in bad_queries:
        resp = await admin_stack.admin.get(f"/admin/v1/tenants/{tenant}/usage", params=params)
        assert resp.status_code == 422, (params, resp.status_code, resp.text)
    for body in ({"tokens_per_minute": -1}, {"tokens_per_day": "lots"},
                 {"tokens_per_minute": 10**13}):  # fmt: skip
        resp = await admin_stack.admin.put(f"/admin/v1/tenants/{tenant}/budget", json=body)
        assert resp.status_code == 422, (body, resp.status_code, resp.text)
    resp = await admin_stack.admin.get("/admin/v1/tenants/t%2A/usage")
    assert resp.status_code == 422, resp.text


async def test_a_tenant_s_own_budget_comes_with_its_turn_and_ends_it(
    admin_stack: AdminStack,
) -> None:
    """The engine reads no database: the operator's budget for a tenant reaches a running
    turn because the gateway puts the limits in ``ChatRequested``. A round that crosses
    the tenant's own 500 tokens a minute (the stack's default: unlimited) finishes, and the
    next model call is not made: ``budget_exceeded``."""
    if time.time() % 60 > 40:  # the minute budget: do not straddle two windows
        await asyncio.sleep(61 - time.time() % 60)
    tag = secrets.token_hex(3)
    think = {
        "name": "thinking",
        "arguments": {
            "thought": "step",
            "next_thought_needed": True,
            "thought_number": 1,
            "total_thoughts": 3,
        },
    }
    tenant = await admin_stack.tenant()
    budget = {"tokens_per_minute": 500, "tokens_per_day": None}
    resp = await admin_stack.admin.put(f"/admin/v1/tenants/{tenant}/budget", json=budget)
    assert resp.status_code == 200, resp.text
    key = (await admin_stack.key(tenant, "dana"))["secret"]
    async with (
        httpx.AsyncClient(base_url=admin_stack.stack.llm_url, timeout=30) as llm,
        admin_stack.public(key) as dana,
    ):
        await llm.post("/_script", json={"steps": [
            {"match": f"COSTLY {tag}", "tool_calls": [think],
             "usage": {"prompt_tokens": 550, "completion_tokens": 50}},
        ]})  # fmt: skip
        agent = await dana.post(
            "/api/v1/agents", json={"name": "thinker", "kb_selection_mode": "none",
                                    "allowed_tools": ["thinking"]},
        )  # fmt: skip
        assert agent.status_code == 201, agent.text
        session = await dana.post("/api/v1/sessions", json={"agent_id": agent.json()["id"]})
        assert session.status_code == 201, session.text
        events = await read_turn(
            dana, f"/api/v1/agent-chat/{session.json()['id']}", api_key=key,
            json_body={"query": f"COSTLY {tag} question"},
        )  # fmt: skip
        await llm.post("/_reset")
    assert [e.event for e in events].count("tool_result") == 1
    [error] = [e.data["data"] for e in events if e.event == "error"]
    assert error["code"] == "budget_exceeded" and "500" in error["message"], error
    assert events[-1].data["data"]["status"] == "failed"
