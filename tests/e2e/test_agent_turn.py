"""One agent turn end to end through Kafka, and the second turn seeing the first.

POST agent-chat -> ChatRequested -> engine -> scripted LLM (demo policy, over HTTP with the
openai client) -> tool.calls -> tool-exec search_knowledge on PostgreSQL -> tool.results ->
engine -> agent.events -> gateway projector -> Redis Stream -> SSE; memory persists.
"""

from __future__ import annotations

import asyncio
import json
import re
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
    assert streamed == complete["final_answer"]
    assert complete["steps"][0]["tool_calls"][0]["tool_name"] == "search_knowledge"

    messages = await _wait_for_messages(api, session_id, 2)
    user, assistant = messages
    assert user["role"] == "user" and user["content"] == body["query"]
    assert assistant["is_completed"] and assistant["content"] == complete["final_answer"]
    assert assistant["agent_steps"][0]["tool_calls"][0]["success"] is True
    assert assistant["references"] and assistant["references"][0]["alias"] == "c1"


async def test_streamed_deltas_complete_and_stored_answer_agree_byte_for_byte(
    api: httpx.AsyncClient, stack: LocalStack, llm: httpx.AsyncClient
) -> None:  # SPEC E-10
    """An answer with leading and trailing whitespace and a newline: what the client
    concatenates from the answering round's deltas, ``complete.final_answer`` and the
    stored assistant message are the same string, whitespace included."""
    pieces = [" hi", " there ", "\n"]
    await llm.post("/_script", json={"steps": [{"match": "SPACES", "content": pieces}]})
    session_id = await _session(api)
    events = await _turn(api, stack, session_id, {"query": "SPACES: say hi"})
    complete = events[-1].data["data"]
    assert complete["status"] == "completed", complete
    answering = complete["rounds"] - 1
    streamed = "".join(
        e.data["data"]["delta"]
        for e in events
        if e.event == "final_answer" and e.data["data"]["round"] == answering
    )
    assert streamed == complete["final_answer"] == " hi there \n"
    _, assistant = await _wait_for_messages(api, session_id, 2)
    assert assistant["content"] == " hi there \n"


async def test_second_turn_sees_the_first_in_its_history(
    api: httpx.AsyncClient, stack: LocalStack, llm: httpx.AsyncClient, knowledge_base: str
) -> None:
    session_id = await _session(api)
    first = {"query": "Which regions store customer data?", "knowledge_base_ids": [knowledge_base]}
    events = await _turn(api, stack, session_id, first)
    first_answer = events[-1].data["data"]["final_answer"]
    await _wait_for_messages(api, session_id, 2)
    await llm.post("/_reset")

    question = "And how is that data encrypted?"
    second = {"query": question, "knowledge_base_ids": [knowledge_base]}
    events = await _turn(api, stack, session_id, second)
    assert events[-1].data["data"]["status"] == "completed"

    sent = (await chat_requests(llm))[0]["messages"]
    contents = [m.get("content") or "" for m in sent]
    assert any(c == first["query"] for c in contents), contents
    assert first_answer in contents
    assert any("Previous retrieval result omitted" in c for c in contents)  # SPEC T-20
    assert contents[-1].startswith(question)


def _pos(entry_id: str) -> tuple[int, int]:
    ms, seq = entry_id.split("-")
    return int(ms), int(seq)


STORED_ID = re.compile(r"\b(?:kb|doc|chk)_[0-9A-Z]{26}\b")
UUID = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.I)


async def test_the_model_never_sees_a_stored_id_yet_the_stream_names_them(
    api: httpx.AsyncClient, stack: LocalStack, llm: httpx.AsyncClient, knowledge_base: str
) -> None:  # SPEC E-22, T-07
    """Two turns that search, list and read documents by handle: no request to the model
    holds a knowledge base, document or chunk id (nor any UUID but the session's own,
    which the runtime context names), while the stream's references carry the real ids."""
    await llm.post("/_script", json={"steps": [
        {"match": "ALIASES", "tool_calls": [
            {"name": "search_knowledge", "arguments": {"query": "refund annual plan"}},
            {"name": "list_documents", "arguments": {}},
        ]},
        {"match": "ALIASES", "tool_calls": [
            {"name": "read_document", "arguments": {"id": "d1"}},
            {"name": "read_document", "arguments": {"id": "c1", "context": 1}},
        ]},
        {"match": "ALIASES", "content": "Annual plans are refunded within 30 days [c1]."},
        {"match": "ALIASES", "tool_calls": [
            {"name": "search_knowledge", "arguments": {"query": "data regions"}},
        ]},
        {"match": "ALIASES", "content": "Data stays in the listed regions [c2]."},
    ]})  # fmt: skip
    session_id = await _session(api)
    body = {"query": "ALIASES: how are refunds handled?", "knowledge_base_ids": [knowledge_base]}
    first = await _turn(api, stack, session_id, body)
    await _wait_for_messages(api, session_id, 2)
    second = await _turn(api, stack, session_id, {**body, "query": "ALIASES: and the data?"})

    for events in (first, second):
        assert events[-1].data["data"]["status"] == "completed", events[-1].data
        results = [e.data["data"] for e in events if e.event == "tool_result"]
        assert results and all(r["success"] for r in results), results
    references = [
        ref for e in first + second if e.event == "references"
        for ref in e.data["data"]["references"]
    ]  # fmt: skip
    documents = (await api.get(f"/api/v1/knowledge-bases/{knowledge_base}/documents")).json()
    real_ids = {knowledge_base, *(d["id"] for d in documents["items"])}
    real_ids |= {ref["chunk_id"] for ref in references}
    assert {ref["knowledge_base_id"] for ref in references} == {knowledge_base}
    assert any(STORED_ID.fullmatch(ref["chunk_id"]) for ref in references), references

    requests = await chat_requests(llm)
    assert len(requests) == 5
    sent = json.dumps(requests)
    assert "d1" in sent and "c1" in sent  # the handles did reach the model
    assert STORED_ID.findall(sent) == []
    assert [real for real in real_ids if real in sent] == []
    assert set(UUID.findall(sent)) <= {session_id}
