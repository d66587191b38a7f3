"""The knowledge graph and real KB capabilities through the public API, with the scripted
model (SPEC T-10, A-07, A-08).

A document posted to a graph KB is extracted by the ingestion worker (the scripted model
answers the extraction prompt); a turn searches, then queries the graph by the KB's
handle and reads relations with their source passages; an agent whose KBs have no graph
is not offered ``query_knowledge_graph`` while its other tools stay.
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import httpx
from weft_testkit import LocalStack, chat_requests, read_turn

from tests.e2e.test_metrics import model_calls

GRAPH_JSON = {
    "entities": [
        {"name": "Quillmoor Anvils", "type": "organisation", "description": "Anvil maker."},
        {"name": "Orla Venn", "type": "person"},
    ],
    "relations": [{"source": "Orla Venn", "relation": "founded", "target": "Quillmoor Anvils"}],
}
TEXT = "Orla Venn founded Quillmoor Anvils in 1931; the firm forges anvils for smiths."
STORED_ID = re.compile(r"\b(?:kb|doc|chk|ent|rel)_[0-9A-Z]{26}\b")


async def _graph_kb(api: httpx.AsyncClient, llm: httpx.AsyncClient) -> str:
    """A graph KB holding TEXT, its extraction done."""
    await llm.post("/_script", json={"steps": [
        {"match": "Quillmoor", "content": json.dumps(GRAPH_JSON)},
    ]})  # fmt: skip
    created = await api.post(
        "/api/v1/knowledge-bases", json={"name": "graph", "graph_enabled": True}
    )
    assert created.status_code == 201 and created.json()["graph_enabled"] is True, created.text
    kb: str = created.json()["id"]
    doc = {"title": "Quillmoor history", "content": TEXT}
    added = await api.post(f"/api/v1/knowledge-bases/{kb}/documents", json=doc)
    assert added.status_code == 201, added.text
    for _ in range(200):
        view = (await api.get(f"/api/v1/knowledge-bases/{kb}")).json()
        if view["graph"]["documents_ready"] or view["graph"]["documents_failed"]:
            break
        await asyncio.sleep(0.1)
    assert view["graph"] == {
        "documents_pending": 0, "documents_paused": 0, "documents_processing": 0,
        "documents_ready": 1,
        "documents_failed": 0, "entities": 2, "relations": 1,
    }, view  # fmt: skip
    assert view["capabilities"] == ["graph", "keyword", "vector"]
    return kb


async def _agent(api: httpx.AsyncClient, kb: str, tools: list[str]) -> str:
    body = {"name": "graph agent", "allowed_tools": tools, "kb_selection_mode": "selected",
            "knowledge_base_ids": [kb]}  # fmt: skip
    resp = await api.post("/api/v1/agents", json=body)
    assert resp.status_code == 201, resp.text
    agent_id: str = resp.json()["id"]
    return agent_id


async def _turn(api: httpx.AsyncClient, stack: LocalStack, agent: str, query: str) -> list[Any]:
    session = (await api.post("/api/v1/sessions", json={"agent_id": agent})).json()["id"]
    events = await read_turn(
        api, f"/api/v1/agent-chat/{session}", api_key=stack.api_key, json_body={"query": query}
    )
    assert events[-1].data["data"]["status"] == "completed", events[-1].data
    return events


async def test_a_graph_query_returns_relations_with_their_source_passages(
    api: httpx.AsyncClient, stack: LocalStack, llm: httpx.AsyncClient
) -> None:  # SPEC T-10, E-22
    calls_before = await model_calls(stack, "knowledge_worker")
    kb = await _graph_kb(api, llm)
    # The extraction's model call is in the worker's weft_llm_* metrics (observability).
    assert await model_calls(stack, "knowledge_worker") >= calls_before + 1
    extraction = (await chat_requests(llm))[-1]
    assert "knowledge graph" in extraction["messages"][0]["content"]
    question = {"knowledge_base_ids": ["b1"], "query": "Who founded Quillmoor Anvils?"}
    await llm.post("/_script", json={"steps": [
        {"match": "GRAPHQ", "tool_calls": [
            {"name": "search_knowledge", "arguments": {"query": "Quillmoor founder"}}]},
        {"match": "GRAPHQ", "tool_calls": [
            {"name": "query_knowledge_graph", "arguments": question}]},
        {"match": "GRAPHQ", "content": "Orla Venn founded it [c1]."},
    ]})  # fmt: skip
    agent = await _agent(api, kb, ["search_knowledge", "query_knowledge_graph"])
    events = await _turn(api, stack, agent, "GRAPHQ: who founded Quillmoor?")
    results = [e.data["data"] for e in events if e.event == "tool_result"]
    assert [r["success"] for r in results] == [True, True], results

    requests = await chat_requests(llm)
    graph_result = requests[-1]["messages"][-1]["content"]
    assert '<knowledge_base id="b1">' in graph_result
    assert '<relation source="Orla Venn" relation="founded" target="Quillmoor Anvils"' in (
        graph_result
    )
    assert "<source_passages>" in graph_result and "forges anvils" in graph_result
    assert STORED_ID.findall(json.dumps(requests[-3:])) == []  # the model sees handles only


async def test_without_a_graph_in_scope_the_graph_tool_is_dropped_not_the_turn(
    api: httpx.AsyncClient, stack: LocalStack, llm: httpx.AsyncClient, knowledge_base: str
) -> None:  # SPEC A-08 step 4 (the safety net), A-07 (save-time guard)
    only_graph = {
        "name": "g", "allowed_tools": ["query_knowledge_graph"],
        "kb_selection_mode": "selected", "knowledge_base_ids": [knowledge_base],
    }  # fmt: skip
    refused = await api.post("/api/v1/agents", json=only_graph)
    assert refused.status_code == 400 and "lacks the capability graph" in refused.text

    agent = await _agent(api, knowledge_base, ["search_knowledge", "query_knowledge_graph"])
    await llm.post("/_script", json={"steps": [{"match": "NOGRAPH", "content": "Fine."}]})
    await _turn(api, stack, agent, "NOGRAPH: hello")
    offered = {t["function"]["name"] for t in (await chat_requests(llm))[-1]["tools"]}
    assert "search_knowledge" in offered and "query_knowledge_graph" not in offered
