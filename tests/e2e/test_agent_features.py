"""Agent features through the real stack: reasoning effort reaching the model (SPEC A-05),
prompt placeholders substituted per request, and the KB capability guard (A-07).

Gateway -> agent-config (PostgreSQL) -> Kafka -> engine -> scripted LLM over HTTP with the
openai client; the scripted LLM's request log shows what the model received.
"""

from __future__ import annotations

from typing import Any

import httpx
from weft_testkit import LocalStack, chat_requests, read_turn


async def _agent(api: httpx.AsyncClient, **fields: Any) -> str:
    resp = await api.post("/api/v1/agents", json={"name": "e2e agent", **fields})
    assert resp.status_code == 201, resp.text
    agent_id: str = resp.json()["id"]
    return agent_id


async def _chat(
    api: httpx.AsyncClient, stack: LocalStack, llm: httpx.AsyncClient, agent_id: str, **body: Any
) -> dict[str, Any]:
    """One completed turn; returns the last chat-completion request the model received."""
    session = await api.post("/api/v1/sessions", json={"agent_id": agent_id})
    assert session.status_code == 201, session.text
    events = await read_turn(
        api, f"/api/v1/agent-chat/{session.json()['id']}", api_key=stack.api_key,
        json_body={"query": "Say hello", **body},
    )  # fmt: skip
    assert events[-1].data["data"]["status"] == "completed", events[-1].data
    return (await chat_requests(llm))[-1]


async def test_reasoning_effort_reaches_the_model(
    api: httpx.AsyncClient, stack: LocalStack, llm: httpx.AsyncClient
) -> None:
    """SPEC A-05: the resolved effort is the `reasoning_effort` of the model request:
    clamped to the model's levels (weft-scripted tops out at high), overridden by the
    chat request, `thinking` as a fallback (true -> auto = parameter omitted, false -> off
    = "none"); the request may also switch the answering model (summary_model_id)."""
    pure = {"allowed_tools": [], "kb_selection_mode": "none"}
    agent = await _agent(api, reasoning_effort="xhigh", thinking=False, **pure)
    assert (await _chat(api, stack, llm, agent))["reasoning_effort"] == "high"
    sent = await _chat(api, stack, llm, agent, reasoning_effort="minimal")
    assert sent["reasoning_effort"] == "minimal"
    sent = await _chat(api, stack, llm, agent, reasoning_effort="max", summary_model_id="o3-mini")
    assert sent["model"] == "o3-mini" and sent["reasoning_effort"] == "high"

    thinking = await _agent(api, thinking=True, **pure)
    assert "reasoning_effort" not in await _chat(api, stack, llm, thinking)
    off = await _agent(api, thinking=False, **pure)
    assert (await _chat(api, stack, llm, off))["reasoning_effort"] == "none"
    plain = await _agent(api, **pure)
    assert "reasoning_effort" not in await _chat(api, stack, llm, plain)

    bad = await api.post(
        "/api/v1/agent-chat/ses_x",
        json={"query": "q", "agent_id": agent, "reasoning_effort": "turbo"},
    )
    assert bad.status_code == 422


async def test_placeholders_are_substituted_in_the_system_prompt(
    api: httpx.AsyncClient, stack: LocalStack, llm: httpx.AsyncClient, knowledge_base: str
) -> None:
    """Placeholders (GET /agents/placeholders) become this request's values in the system
    prompt the model receives; unknown placeholders stay as written."""
    names = [p["name"] for p in (await api.get("/api/v1/agents/placeholders")).json()]
    assert "{{knowledge_bases}}" in names and "{{agent_name}}" in names
    prompt = (
        "You are {{agent_name}} talking to {{user_name}} at {{current_time}} in {{language}}. "
        "Knowledge:\n{{knowledge_bases}}\nWeb search is {{web_search_status}}. "
        "{{not_a_placeholder}}"
    )
    agent = await _agent(
        api, name="Placeholder Bot", system_prompt=prompt, allowed_tools=["search_knowledge"],
        kb_selection_mode="selected", knowledge_base_ids=[knowledge_base],
    )  # fmt: skip
    sent = await _chat(api, stack, llm, agent)
    system = sent["messages"][0]["content"]
    assert system.startswith("You are Placeholder Bot talking to dev at 20"), system
    assert " in English." in system
    assert "Knowledge:\n- sample\n" in system
    assert "Web search is disabled. {{not_a_placeholder}}" in system


async def test_incompatible_knowledge_bases_are_refused(
    api: httpx.AsyncClient, stack: LocalStack, knowledge_base: str
) -> None:
    """SPEC A-07 backend guard: saving an agent with KBs its tools cannot use is a 400
    naming the KB and the missing capability (document KBs offer vector + keyword)."""
    wiki = {"allowed_tools": ["wiki_search", "wiki_read_page"], "kb_selection_mode": "selected"}
    resp = await api.post(
        "/api/v1/agents", json={"name": "wiki", **wiki, "knowledge_base_ids": [knowledge_base]}
    )
    assert resp.status_code == 400, resp.text
    detail = resp.json()["detail"]
    assert knowledge_base in detail and "wiki" in detail and "sample" in detail

    resp = await api.post(
        "/api/v1/agents", json={"name": "x", **wiki, "knowledge_base_ids": ["kb_not_ours"]}
    )
    assert resp.status_code == 400 and "kb_not_ours" in resp.json()["detail"]

    rag = await _agent(
        api, allowed_tools=["search_knowledge"], kb_selection_mode="selected",
        knowledge_base_ids=[knowledge_base],
    )  # fmt: skip
    resp = await api.put(
        f"/api/v1/agents/{rag}",
        json={"name": "now wiki", **wiki, "knowledge_base_ids": [knowledge_base]},
    )
    assert resp.status_code == 400 and knowledge_base in resp.json()["detail"]

    # At run time the safety net (A-08 step 4) drops what the request's KBs cannot serve
    # instead of refusing the request (tests/e2e/test_knowledge_graph.py shows the turn).


async def test_the_wiki_builtins_are_offered(api: httpx.AsyncClient) -> None:
    """SPEC A-03: the wiki built-ins' tools run (T-18): the researcher is listed, the
    fixer (hidden, as in the reference) loads by id, both available."""
    listed = {a["id"]: a for a in (await api.get("/api/v1/agents")).json()}
    assert listed["builtin-wiki-researcher"]["available"] is True
    assert "builtin-wiki-fixer" not in listed
    view = (await api.get("/api/v1/agents/builtin-wiki-fixer")).json()
    assert view["available"] is True and view["unavailable_reason"] is None
    assert (
        await api.post("/api/v1/sessions", json={"agent_id": "builtin-wiki-fixer"})
    ).status_code == 201
