"""One agent turn end to end through Kafka, and the second turn seeing the first.

POST agent-chat -> ChatRequested -> engine -> scripted LLM (demo policy, over HTTP with the
openai client) -> tool.calls -> tool-exec search_knowledge on PostgreSQL -> tool.results ->
engine -> agent.events -> gateway projector -> Redis Stream -> SSE; memory persists.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
from weft_testkit import LocalStack, SseEvent, chat_requests, read_turn

AGENT = "builtin-smart-reasoning"


async def _session(api: httpx.AsyncClient, agent_id: str | None = AGENT) -> str:
    resp = await api.post("/api/v1/sessions", json={"title": "e2e", "agent_id": agent_id})
    assert resp.status_code == 201, resp.text
    session_id: str = resp.json()["id"]
    return session_id


async def _turn(
    api: httpx.AsyncClient, stack: LocalStack, session_id: str, body: dict[str, Any]
) -> list[SseEvent]:
    return await read_turn(
        api, f"/api/v1/agent-chat/{session_id}", api_key=stack.api_key, json_body=body
    )


async def _wait_for_messages(
    api: httpx.AsyncClient, session_id: str, count: int, timeout_s: float = 30
) -> list[dict[str, Any]]:
    """Memory persists asynchronously from Kafka: wait until the turn is stored complete."""
    async with asyncio.timeout(timeout_s):
        while True:
            messages: list[dict[str, Any]] = (
                await api.get(f"/api/v1/sessions/{session_id}/messages")
            ).json()
            done = [m for m in messages if m["role"] == "user" or m["status"] != "running"]
            if len(done) >= count:
                return messages
            await asyncio.sleep(0.2)


async def test_agent_turn_streams_search_and_cited_answer(
    api: httpx.AsyncClient, stack: LocalStack, knowledge_base: str
) -> None:
    session_id = await _session(api)
    body = {"query": "How long do I have to get a refund on an annual plan?",
            "knowledge_base_ids": [knowledge_base]}  # fmt: skip
    events = await _turn(api, stack, session_id, body)
    types = [e.event for e in events]

    assert types[0] == "turn_started" and types[-1] == "complete"
    assert types.count("complete") == 1  # SPEC E-04
    for expected in ("thought", "tool_call", "tool_result", "references", "final_answer"):
        assert expected in types, types
    assert types.index("tool_call") < types.index("tool_result") < types.index("final_answer")

    seqs = [e.data["seq"] for e in events]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)  # invariant 1
    positions = [_pos(e.id) for e in events]
    assert positions == sorted(positions)  # SSE ids are stable, increasing stream positions

    call = next(e for e in events if e.event == "tool_call").data["data"]
    assert call["tool_name"] == "search_knowledge"
    result = next(e for e in events if e.event == "tool_result").data["data"]
    assert result["success"] and "30 days" in result["output"]

    complete = events[-1].data["data"]
    assert complete["status"] == "completed"
    assert "30 days" in complete["final_answer"] and "[c" in complete["final_answer"]
    streamed = "".join(e.data["data"]["delta"] for e in events if e.event == "final_answer")
    assert streamed.strip() == complete["final_answer"].strip()
    assert complete["steps"][0]["tool_calls"][0]["tool_name"] == "search_knowledge"

    messages = await _wait_for_messages(api, session_id, 2)
    user, assistant = messages
    assert user["role"] == "user" and user["content"] == body["query"]
    assert assistant["is_completed"] and assistant["content"] == complete["final_answer"]
    assert assistant["agent_steps"][0]["tool_calls"][0]["success"] is True
    assert assistant["references"] and assistant["references"][0]["alias"] == "c1"


async def test_second_turn_sees_the_first_in_its_history(
    api: httpx.AsyncClient, stack: LocalStack, llm: httpx.AsyncClient, knowledge_base: str
) -> None:
    session_id = await _session(api)
    first = {"query": "Which regions store customer data?", "knowledge_base_ids": [knowledge_base]}
    events = await _turn(api, stack, session_id, first)
    first_answer = events[-1].data["data"]["final_answer"]
    await _wait_for_messages(api, session_id, 2)
    await llm.post("/_reset")

    second = {"query": "And how is that data encrypted?", "knowledge_base_ids": [knowledge_base]}
    events = await _turn(api, stack, session_id, second)
    assert events[-1].data["data"]["status"] == "completed"

    sent = (await chat_requests(llm))[0]["messages"]
    contents = [m.get("content") or "" for m in sent]
    assert any(c == first["query"] for c in contents), contents
    assert first_answer in contents
    assert any("Previous retrieval result omitted" in c for c in contents)  # SPEC T-20
    assert contents[-1].startswith(second["query"])


def _pos(entry_id: str) -> tuple[int, int]:
    ms, seq = entry_id.split("-")
    return int(ms), int(seq)
