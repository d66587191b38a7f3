"""Contract tests of the public API: agents (proxied to agent-config), sessions and
messages (proxied to memory), knowledge-chat mode choice (SPEC A-09, C-01, C-02)."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
from weft_testkit import LocalStack, read_turn


async def test_agent_crud_copy_and_rules(api: httpx.AsyncClient) -> None:
    created = await api.post(
        "/api/v1/agents",
        json={"name": "Helper", "agent_type": "rag-qa", "temperature": 0.2, "max_iterations": 0},
    )
    assert created.status_code == 201, created.text
    agent = created.json()
    agent_id = agent["id"]
    assert agent["temperature"] == 0.2  # the creator's value wins over the preset
    assert agent["max_iterations"] == 5  # SPEC A-04 service validation: 0 -> 5
    assert agent["allowed_tools"] == ["search_knowledge", "read_document", "list_documents"]
    assert agent["citation_enabled"] is True and agent["access_level"] == "auto_write"
    assert agent["builtin"] is False

    assert (await api.get(f"/api/v1/agents/{agent_id}")).json()["name"] == "Helper"
    listed = {a["id"]: a for a in (await api.get("/api/v1/agents")).json()}
    assert agent_id in listed and "builtin-smart-reasoning" in listed
    assert "builtin-wiki-fixer" not in listed  # hidden built-in ...
    assert (await api.get("/api/v1/agents/builtin-wiki-fixer")).status_code == 200  # ... loadable
    assert listed["builtin-smart-reasoning"]["available"] is True

    updated = await api.put(
        f"/api/v1/agents/{agent_id}",
        json={"name": "Helper 2", "allowed_tools": ["knowledge_search", "web_search"]},
    )
    assert updated.status_code == 200, updated.text
    assert updated.json()["allowed_tools"] == ["search_knowledge"]  # SPEC A-06
    assert updated.json()["temperature"] == 0.7  # PUT replaces; defaults apply again

    copy = await api.post(f"/api/v1/agents/{agent_id}/copy")
    assert copy.status_code == 201 and copy.json()["name"] == "Helper 2 (copy)"
    assert copy.json()["id"] != agent_id
    builtin_copy = await api.post("/api/v1/agents/builtin-smart-reasoning/copy")
    assert builtin_copy.status_code == 201 and builtin_copy.json()["builtin"] is False

    assert (await api.delete(f"/api/v1/agents/{agent_id}")).status_code == 204
    assert (await api.get(f"/api/v1/agents/{agent_id}")).status_code == 404
    assert (await api.delete(f"/api/v1/agents/{agent_id}")).status_code == 404


async def test_agent_errors(api: httpx.AsyncClient) -> None:
    unknown = await api.post("/api/v1/agents", json={"name": "x", "allowed_tools": ["bogus"]})
    assert unknown.status_code == 400 and "bogus" in unknown.json()["detail"]  # SPEC A-06
    bad = await api.post("/api/v1/agents", json={"name": "x", "reasoning_effort": "extreme"})
    assert bad.status_code == 422  # SPEC A-05
    assert (
        await api.put("/api/v1/agents/builtin-quick-answer", json={"name": "x"})
    ).status_code == 403
    assert (await api.delete("/api/v1/agents/builtin-quick-answer")).status_code == 403
    assert (await api.get("/api/v1/agents/agt_missing")).status_code == 404


async def test_catalog_presets_placeholders(api: httpx.AsyncClient) -> None:
    tools = (await api.get("/api/v1/agents/tools")).json()
    assert "search_knowledge" in {t["name"] for t in tools}  # SPEC A-07
    presets = {p["id"] for p in (await api.get("/api/v1/agents/presets")).json()}
    assert {"rag-qa", "wiki-qa", "hybrid-rag-wiki", "data-analysis", "custom"} <= presets
    assert (await api.get("/api/v1/agents/placeholders")).status_code == 200


async def _wait_messages(api: httpx.AsyncClient, session_id: str, count: int) -> list[Any]:
    async with asyncio.timeout(30):
        while True:
            messages: list[Any] = (await api.get(f"/api/v1/sessions/{session_id}/messages")).json()
            if (
                len([m for m in messages if m["role"] == "user" or m["status"] != "running"])
                >= count
            ):
                return messages
            await asyncio.sleep(0.2)


async def test_sessions_crud_and_message_pages(
    api: httpx.AsyncClient, stack: LocalStack, knowledge_base: str
) -> None:
    session_id = (await api.post("/api/v1/sessions", json={"title": "a"})).json()["id"]
    renamed = await api.patch(f"/api/v1/sessions/{session_id}", json={"title": "renamed"})
    assert renamed.status_code == 200 and renamed.json()["title"] == "renamed"
    listed = (await api.get("/api/v1/sessions", params={"limit": 100})).json()
    assert session_id in {s["id"] for s in listed}

    # knowledge-chat without an agent: normal mode with the quick-answer agent (C-01, C-02)
    body = {"query": "refund annual plan?", "knowledge_base_ids": [knowledge_base]}
    events = await read_turn(
        api, f"/api/v1/knowledge-chat/{session_id}", api_key=stack.api_key, json_body=body
    )
    assert events[0].data["data"]["mode"] == "normal"
    assert events[-1].event == "complete"
    # agent-chat without any agent: the exact 400 of C-02
    missing = await api.post(f"/api/v1/agent-chat/{session_id}", json={"query": "q"})
    assert missing.status_code == 400
    assert missing.json()["detail"] == "agent_id is required when agent mode is enabled"

    messages = await _wait_messages(api, session_id, 2)
    assert len(messages) == 2
    newest = (await api.get(f"/api/v1/sessions/{session_id}/messages", params={"limit": 1})).json()
    assert [m["id"] for m in newest] == [messages[-1]["id"]]
    older = await api.get(
        f"/api/v1/sessions/{session_id}/messages", params={"limit": 1, "before": newest[0]["id"]}
    )
    assert [m["id"] for m in older.json()] == [messages[0]["id"]]

    assert (await api.delete(f"/api/v1/sessions/{session_id}/messages")).status_code == 204
    assert (await api.get(f"/api/v1/sessions/{session_id}/messages")).json() == []
    assert (await api.delete(f"/api/v1/sessions/{session_id}")).status_code == 204
    assert (await api.get(f"/api/v1/sessions/{session_id}")).status_code == 404
