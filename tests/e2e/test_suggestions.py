"""Suggested questions through the public API on a whole stack (SPEC Q-01..Q-05): an agent
with follow-ups on answers a turn; a client following the session's stream gets
``suggestions_ready`` after ``complete`` without polling, reads the set, clicks one, and
a regenerated set reaches the stream too; an empty session gets the agent's starters.
The follow-ups come from the scripted model (a step matched on the generator's prompt)."""

from __future__ import annotations

import json
from typing import Any

import httpx
from httpx_sse import aconnect_sse
from weft_testkit import LocalStack, SseEvent, chat_requests, read_turn

GENERATOR_PROMPT = "Suggest the follow-up questions now"
ANSWER = "The plan costs 20 euros per month."


async def _agent(api: httpx.AsyncClient) -> str:
    resp = await api.post(
        "/api/v1/agents",
        json={
            "name": "Pricing",
            "description": "Answers questions about our prices",
            "question_suggestions": {
                "starters": {"mode": "curated", "curated": ["What plans exist?", "Any discount?"]},
                "follow_ups": {
                    "enabled": True,
                    "mode": "hybrid",
                    "count": 3,
                    "curated": ["Show me the plans"],
                    "allow_regenerate": True,
                },
            },
        },
    )
    assert resp.status_code == 201, resp.text
    return str(resp.json()["id"])


async def _session(api: httpx.AsyncClient, agent_id: str) -> str:
    resp = await api.post("/api/v1/sessions", json={"title": "q", "agent_id": agent_id})
    assert resp.status_code == 201, resp.text
    return str(resp.json()["id"])


async def _script(llm: httpx.AsyncClient, follow_ups: list[str]) -> None:
    steps = [
        {"match": "how much", "content": ANSWER},
        {
            "match": GENERATOR_PROMPT,
            "content": json.dumps([{"text": q, "category": "deepen"} for q in follow_ups]),
        },
    ]
    resp = await llm.post("/_script", json={"steps": steps, "fallback": "demo"})
    assert resp.status_code == 200, resp.text


async def _follow(
    api: httpx.AsyncClient, session_id: str, after: str, until: str = "suggestions_ready"
) -> list[SseEvent]:
    """The session's stream after ``after`` until an event of type ``until``."""
    events: list[SseEvent] = []
    url = f"/api/v1/sessions/{session_id}/stream"
    async with aconnect_sse(
        api, "GET", url, headers={"Last-Event-ID": after}, timeout=120
    ) as source:
        assert source.response.status_code == 200, await source.response.aread()
        async for sse in source.aiter_sse():
            if not sse.event or not sse.data:
                continue
            events.append(SseEvent(sse.id, sse.event, json.loads(sse.data), 0.0))
            if sse.event == until:
                break
    return events


def _position(entry_id: str) -> tuple[int, int]:
    ms, _, n = entry_id.partition("-")
    return int(ms), int(n)


async def test_follow_ups_reach_the_stream_then_the_api_and_a_click_is_recorded(
    stack: LocalStack, api: httpx.AsyncClient, llm: httpx.AsyncClient
) -> None:
    agent_id = await _agent(api)
    session_id = await _session(api, agent_id)
    await _script(llm, ["Is VAT included?", "Can I pay yearly?"])

    turn = await read_turn(
        api, f"/api/v1/agent-chat/{session_id}", api_key=stack.api_key,
        json_body={"query": "how much is the plan"},
        headers={"Accept-Language": "fr-CA,fr;q=0.9,en;q=0.5"},
    )  # fmt: skip
    complete = turn[-1]
    assert complete.event == "complete" and complete.data["data"]["status"] == "completed"
    assert turn[0].event == "turn_started" and turn[0].data["data"]["locale"] == "fr-CA"

    after = await _follow(api, session_id, complete.id)
    ready = after[-1]
    assert ready.event == "suggestions_ready"
    assert _position(ready.id) > _position(complete.id)
    data: dict[str, Any] = ready.data["data"]
    assert data["state"] == "ready", data
    assert data["locale"] == "fr-CA"  # the set is the user's language's (SPEC Q-04)
    texts = [q["text"] for q in data["questions"]]
    assert texts == ["Is VAT included?", "Can I pay yearly?", "Show me the plans"]
    message_id = data["assistant_message_id"]

    path = f"/api/v1/sessions/{session_id}"
    got = await api.get(f"{path}/suggestions", params={"assistant_message_id": message_id})
    assert got.status_code == 200, got.text
    assert got.json()["state"] == "ready"
    assert [q["text"] for q in got.json()["questions"]] == texts

    question_id = data["questions"][0]["id"]
    click = await api.post(
        f"{path}/suggestion-events",
        json={"assistant_message_id": message_id, "question_id": question_id, "kind": "click"},
    )
    assert click.status_code == 201, click.text
    assert click.json()["id"]

    # A regenerated set is answered to its caller and announced on the stream as well.
    await _script(llm, ["Is there a free trial?"])
    again = await api.post(f"{path}/suggestions", json={"assistant_message_id": message_id})
    assert again.status_code == 200, again.text
    assert again.json()["questions"][0]["text"] == "Is there a free trial?"
    announced = (await _follow(api, session_id, ready.id))[-1]
    assert announced.event == "suggestions_ready"
    assert announced.data["data"]["questions"][0]["text"] == "Is there a free trial?"


async def test_an_empty_session_gets_its_agents_starters(api: httpx.AsyncClient) -> None:
    session_id = await _session(api, await _agent(api))
    resp = await api.get(f"/api/v1/sessions/{session_id}/starters")
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["state"] == "ready" and body["placement"] == "starter"
    assert [q["text"] for q in body["questions"]] == ["What plans exist?", "Any discount?"]
    assert all(q["source"] == "curated" for q in body["questions"])
    german = await api.get(f"/api/v1/sessions/{session_id}/starters", params={"locale": "de"})
    assert german.status_code == 200 and german.json()["locale"] == "de", german.text
    bad = await api.get(f"/api/v1/sessions/{session_id}/starters", params={"locale": "x/y"})
    assert bad.status_code == 422, bad.text
    click = await api.post(
        f"/api/v1/sessions/{session_id}/suggestion-events",
        json={"placement": "starter", "question_id": body["questions"][0]["id"], "kind": "click"},
    )
    assert click.status_code == 201, click.text


async def test_clicking_a_knowledge_starter_gives_the_model_its_source_first(
    stack: LocalStack, api: httpx.AsyncClient, llm: httpx.AsyncClient, knowledge_base: str
) -> None:
    """SPEC Q-03: the message sent by clicking a knowledge suggestion reaches the model
    with the suggestion's source (retrieved by the gateway from the stored set, within
    the caller's knowledge scope) in front of it."""
    agent = await api.post(
        "/api/v1/agents",
        json={
            "name": "Docs",
            "kb_selection_mode": "selected",
            "knowledge_base_ids": [knowledge_base],
            "question_suggestions": {"starters": {"mode": "knowledge", "count": 2}},
        },
    )
    assert agent.status_code == 201, agent.text
    session_id = await _session(api, str(agent.json()["id"]))
    starters = (await api.get(f"/api/v1/sessions/{session_id}/starters")).json()
    assert starters["state"] == "ready", starters
    clicked = starters["questions"][0]
    assert clicked["source"] == "knowledge" and clicked["document_id"]

    await llm.post("/_script", json={"steps": [], "fallback": "demo"})
    turn = await read_turn(
        api, f"/api/v1/agent-chat/{session_id}", api_key=stack.api_key,
        json_body={
            "query": clicked["text"],
            "suggestion": {"placement": "starter", "question_id": clicked["id"]},
        },
    )  # fmt: skip
    assert turn[-1].data["data"]["status"] == "completed", turn[-1].data
    first = (await chat_requests(llm))[0]
    user = [m for m in first["messages"] if m["role"] == "user"][-1]
    text = user["content"] if isinstance(user["content"], str) else json.dumps(user["content"])
    assert f'document_id="{clicked["document_id"]}"' in text
    assert "<question_source" in text

    unknown = await api.post(
        f"/api/v1/agent-chat/{session_id}",
        json={"query": "x", "suggestion": {"placement": "starter", "question_id": "k99"}},
    )
    assert unknown.status_code == 404, unknown.text
