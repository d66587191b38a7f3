"""Shared agents (SPEC A-10, E-26) through the real stack.

The stack's tenant owns an agent and a knowledge base; a second tenant (its own API key)
is a member of the same organisation. Organisations are seeded through agent-config's
internal API, as an operator would.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from weft_testkit import LocalStack, chat_requests, read_turn

from tests.e2e.test_tenants_isolation import register_key

SECRET = "SECRET-PROMPT-7f3a: answer like a pirate."


@pytest.fixture
async def internal(stack: LocalStack) -> AsyncIterator[httpx.AsyncClient]:
    """agent-config's internal API (organisations are managed there)."""
    async with stack.internal_client("agent_config", timeout=30) as c:
        yield c


@pytest.fixture
async def recipient(
    stack: LocalStack, infra: dict[str, str]
) -> AsyncIterator[tuple[str, httpx.AsyncClient]]:
    """A second tenant on the same stack, with no knowledge base of its own."""
    tenant, key = f"tenant-r-{secrets.token_hex(4)}", f"key-{secrets.token_hex(16)}"
    await register_key(infra["WEFT_DATABASE_URL"], tenant, key)
    headers = {"Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(base_url=stack.gateway_url, headers=headers, timeout=60) as c:
        c.headers["X-Test-Key"] = key
        yield tenant, c


async def _organisation(internal: httpx.AsyncClient, members: dict[str, str]) -> str:
    org = await internal.post("/internal/organisations", json={"name": "acme"})
    assert org.status_code == 201, org.text
    org_id: str = org.json()["id"]
    for tenant, role in members.items():
        resp = await internal.put(
            f"/internal/organisations/{org_id}/members/{tenant}", json={"role": role}
        )
        assert resp.status_code == 200, resp.text
    return org_id


async def _wait_messages(client: httpx.AsyncClient, session_id: str) -> list[dict[str, Any]]:
    async with asyncio.timeout(30):
        while True:
            messages: list[dict[str, Any]] = (
                await client.get(f"/api/v1/sessions/{session_id}/messages")
            ).json()
            if len(messages) >= 2 and all(m.get("status") != "running" for m in messages[1:]):
                return messages
            await asyncio.sleep(0.2)


async def test_share_rules(
    api: httpx.AsyncClient,
    stack: LocalStack,
    internal: httpx.AsyncClient,
    recipient: tuple[str, httpx.AsyncClient],
) -> None:
    """SPEC A-10: owner only, sharer editor+, model and rerank model required, re-share
    idempotent, unknown organisation 404, unshare."""
    other_tenant, other = recipient
    org = await _organisation(internal, {stack.tenant: "viewer", other_tenant: "viewer"})
    no_rerank = (
        await api.post(
            "/api/v1/agents",
            json={"name": "r", "model": "m", "allowed_tools": ["search_knowledge"]},
        )
    ).json()["id"]
    no_model = (await api.post("/api/v1/agents", json={"name": "n", "allowed_tools": []})).json()[
        "id"
    ]
    good = (
        await api.post("/api/v1/agents", json={"name": "g", "model": "m", "rerank_model_id": "rr"})
    ).json()["id"]
    share = {"organisation_id": org}

    resp = await api.post(f"/api/v1/agents/{good}/shares", json=share)
    assert resp.status_code == 403 and "editor" in resp.json()["detail"]  # viewer may not
    await internal.put(
        f"/internal/organisations/{org}/members/{stack.tenant}", json={"role": "editor"}
    )
    resp = await api.post(f"/api/v1/agents/{no_rerank}/shares", json=share)
    assert resp.status_code == 400 and "rerank_model_id" in resp.json()["detail"]
    resp = await api.post(f"/api/v1/agents/{no_model}/shares", json=share)
    assert resp.status_code == 400 and "model" in resp.json()["detail"]
    first = await api.post(f"/api/v1/agents/{good}/shares", json=share)
    again = await api.post(f"/api/v1/agents/{good}/shares", json=share)
    assert (first.status_code, again.status_code) == (201, 200)
    listed = (await api.get(f"/api/v1/agents/{good}/shares")).json()
    assert [s["organisation_id"] for s in listed] == [org]
    edit = await api.put(f"/api/v1/agents/{good}", json={"name": "g", "allowed_tools": []})
    assert edit.status_code == 400 and "is shared" in edit.json()["detail"]  # model dropped
    resp = await api.post(f"/api/v1/agents/{good}/shares", json={"organisation_id": "org_none"})
    assert resp.status_code == 404
    resp = await api.post("/api/v1/agents/builtin-smart-reasoning/shares", json=share)
    assert resp.status_code == 403

    # only the owner: the recipient can neither share, list the shares nor unshare
    for resp in (
        await other.post(f"/api/v1/agents/{good}/shares", json=share),
        await other.get(f"/api/v1/agents/{good}/shares"),
        await other.delete(f"/api/v1/agents/{good}/shares/{org}"),
    ):
        assert resp.status_code == 403, resp.text

    assert (await api.delete(f"/api/v1/agents/{good}/shares/{org}")).status_code == 204
    assert (await other.get(f"/api/v1/agents/{good}")).status_code == 404
    assert (await api.delete(f"/api/v1/agents/{good}/shares/{org}")).status_code == 404


async def test_recipient_uses_shared_agent_read_only_with_owner_knowledge(
    api: httpx.AsyncClient,
    stack: LocalStack,
    llm: httpx.AsyncClient,
    internal: httpx.AsyncClient,
    recipient: tuple[str, httpx.AsyncClient],
    knowledge_base: str,
) -> None:
    """SPEC A-10, E-26: the recipient sees capabilities only (no prompt, no creator), cannot
    edit, delete or copy; its chat runs with the owner's model (its summary_model_id is
    ignored) and searches the owner's knowledge base; the history is the recipient's; the
    recipient can switch the agent off for its tenant."""
    other_tenant, other = recipient
    org = await _organisation(internal, {stack.tenant: "admin", other_tenant: "viewer"})
    definition = {
        "name": "Refund helper", "model": "owner-model-x", "rerank_model_id": "rerank-x",
        "system_prompt": SECRET, "allowed_tools": ["search_knowledge"],
        "kb_selection_mode": "selected", "knowledge_base_ids": [knowledge_base],
    }  # fmt: skip
    agent_id = (await api.post("/api/v1/agents", json=definition)).json()["id"]
    resp = await api.post(f"/api/v1/agents/{agent_id}/shares", json={"organisation_id": org})
    assert resp.status_code == 201, resp.text

    seen = await other.get(f"/api/v1/agents/{agent_id}")
    assert seen.status_code == 200, seen.text
    view = seen.json()
    assert view["permission"] == "viewer" and view["shared"] is True
    assert view["allowed_tools"] == ["search_knowledge"] and view["name"] == "Refund helper"
    for hidden in (SECRET, "created_by", "owner-model-x", "rerank-x", knowledge_base, stack.tenant):
        assert hidden not in seen.text
    listed = (await other.get("/api/v1/agents")).json()
    assert any(a["id"] == agent_id and a["shared"] for a in listed)
    assert SECRET not in (await other.get("/api/v1/shared-agents")).text
    assert (await other.put(f"/api/v1/agents/{agent_id}", json={"name": "mine"})).status_code == 403
    assert (await other.delete(f"/api/v1/agents/{agent_id}")).status_code == 403
    assert (await other.post(f"/api/v1/agents/{agent_id}/copy")).status_code == 403

    session = (await other.post("/api/v1/sessions", json={"agent_id": agent_id})).json()["id"]
    events = await read_turn(
        other, f"/api/v1/agent-chat/{session}", api_key=other.headers["X-Test-Key"],
        json_body={"query": "How long do I have to get a refund on an annual plan?",
                   "summary_model_id": "recipient-model"},
    )  # fmt: skip
    assert events[-1].data["data"]["status"] == "completed", events[-1].data
    result = next(e for e in events if e.event == "tool_result").data["data"]
    assert result["tool_name"] == "search_knowledge"
    assert result["success"] and "30 days" in result["output"]  # the owner's KB
    sent = await chat_requests(llm)
    assert {r["model"] for r in sent} == {"owner-model-x"}
    assert sent[0]["messages"][0]["content"].startswith(SECRET)  # the model gets the prompt

    messages = await _wait_messages(other, session)
    assert messages[0]["content"].startswith("How long")
    assert (await api.get(f"/api/v1/sessions/{session}/messages")).status_code == 404

    resp = await other.post(
        f"/api/v1/agent-chat/{session}", json={"query": "q", "knowledge_base_ids": ["kb_x"]}
    )
    assert resp.status_code in (400, 404)

    switched = await other.put(f"/api/v1/shared-agents/{agent_id}", json={"disabled": True})
    assert switched.status_code == 200 and switched.json()["disabled"] is True
    resp = await other.post(f"/api/v1/agent-chat/{session}", json={"query": "again"})
    assert resp.status_code == 403 and "disabled" in resp.json()["detail"]
    assert all(a["id"] != agent_id for a in (await other.get("/api/v1/agents")).json())
    shared = (await other.get("/api/v1/shared-agents")).json()
    assert [a["disabled"] for a in shared if a["id"] == agent_id] == [True]
    # the owner is not affected by the recipient's switch
    own = await api.get(f"/api/v1/agents/{agent_id}")
    assert own.status_code == 200 and own.json()["system_prompt"] == SECRET
