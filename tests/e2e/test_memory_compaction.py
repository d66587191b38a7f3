"""Memory through the running stack (gateway -> engine -> scripted LLM -> agent.events ->
memory): a stopped turn keeps its partial answer; long-term facts are extracted by memory
after a completed turn and recalled only in the caller's scope (SPEC M-10, T-17). The
compaction e2e (two compactions, restarted engine) is in test_engine_compaction.py."""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
from httpx_sse import aconnect_sse
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine
from weft_gateway.auth import hash_key
from weft_storage.gateway.keys import ApiKey
from weft_testkit import LocalStack, chat_requests, read_turn

AGENT = "builtin-smart-reasoning"


async def test_stopped_turn_is_stored_with_its_partial_answer(
    api: httpx.AsyncClient, llm: httpx.AsyncClient, stack: LocalStack
) -> None:
    # The user stops mid-answer: memory keeps what was streamed, marked partial.
    words = " ".join(f"w{i}" for i in range(300))
    steps = [{"match": "STOPME", "content": words, "chunk_delay_ms": 100}]
    assert (await llm.post("/_script", json={"steps": steps})).status_code == 200
    session_id = (await api.post("/api/v1/sessions", json={"agent_id": AGENT})).json()["id"]
    streamed: list[str] = []
    stopped = False
    async with aconnect_sse(
        api, "POST", f"/api/v1/agent-chat/{session_id}", json={"query": "STOPME"}, timeout=60
    ) as source:
        async for sse in source.aiter_sse():
            if sse.event == "final_answer":
                streamed.append(json.loads(sse.data)["data"]["delta"])
                if len(streamed) == 3 and not stopped:
                    stopped = True
                    resp = await api.post(f"/api/v1/sessions/{session_id}/stop")
                    assert resp.status_code == 202, resp.text
            if sse.event == "complete":
                assert json.loads(sse.data)["data"]["status"] == "cancelled"
                break
    async with asyncio.timeout(30):
        while True:
            messages = (await api.get(f"/api/v1/sessions/{session_id}/messages")).json()
            done = [m for m in messages if m["role"] == "assistant" and m["status"] != "running"]
            if done:
                break
            await asyncio.sleep(0.2)
    assistant = done[0]
    assert assistant["status"] == "cancelled" and not assistant["is_completed"]
    assert assistant["content"] == "".join(streamed) and assistant["content"].startswith("w0")
    async with stack.internal_client("memory", timeout=30) as memory:
        row = (
            await memory.get(
                f"/internal/sessions/{session_id}/messages",
                params={"tenant_id": stack.tenant, "user_id": "dev"},
            )
        ).json()[-1]
    assert row["is_partial"] is True


async def test_facts_extracted_after_a_turn_are_recalled_only_in_the_callers_scope(
    api: httpx.AsyncClient, llm: httpx.AsyncClient, stack: LocalStack, infra: dict[str, str]
) -> None:
    # SPEC M-10 / T-17: after a completed turn of a memory-enabled agent, memory extracts
    # facts by itself (scripted LLM), scoped to (tenant, user); another session of the same
    # user recalls them (memory_recalled + search_memory); another user of the tenant does
    # not; an agent with memory off neither reads nor writes.
    on = await _agent(api, "memory e2e", ["search_conversations"], memory=True)
    off = await _agent(api, "no memory e2e", [], memory=False)
    steps: list[dict[str, Any]] = [
        {"match": "codename is BLUEHERON", "content": "Noted."},
        {"match": "User: My project", "content": '["The user\'s project codename is BLUEHERON."]'},
        {"match": "NOMEMORY", "content": "I do not keep memories."},
        {"match": "User: NOMEMORY", "content": '["The user likes VERMILION."]'},  # never asked
        {"match": "SEARCHTOOLS", "tool_calls": [
            {"name": "search_conversations", "arguments": {"query": "BLUEHERON codename"}},
            {"name": "search_memory", "arguments": {"query": "project codename"}},
        ]},
        {"match": "SEARCHTOOLS", "content": "Your codename is BLUEHERON."},
        {"match": "OTHERUSER", "tool_calls": [
            {"name": "search_memory", "arguments": {"query": "project codename"}},
        ]},
        {"match": "OTHERUSER", "content": "I do not know your codename."},
        {"match": "User: SEARCHTOOLS", "content": "[]"},
        {"match": "User: OTHERUSER", "content": "[]"},
    ]  # fmt: skip
    assert (await llm.post("/_script", json={"steps": steps})).status_code == 200
    async with stack.internal_client("memory", timeout=30) as memory:
        first = await _session(api, on)
        await _turn_with(api, stack, first, "My project codename is BLUEHERON.")
        extraction = await _extraction_done(memory, stack, await _persisted_request(api, first))
        assert extraction["facts"] == 1 and extraction["user_id"] == "dev"
        facts = await _facts(memory, stack, "dev", "codename")
        assert facts == ["The user's project codename is BLUEHERON."]

        # Memory off: no recall although a matching fact exists, no extraction, no fact.
        quiet = await _session(api, off)
        events = await _turn_with(
            api, stack, quiet, "NOMEMORY my favourite colour is VERMILION; my codename?"
        )
        assert not [e for e in events if e.event == "memory_recalled"]
        rid = await _persisted_request(api, quiet)
        status = await memory.get(
            f"/internal/memories/extractions/{rid}",
            params={"tenant_id": stack.tenant, "user_id": "dev"},
        )
        assert status.status_code == 404  # recorded without an extraction row: never one

        second = await _session(api, on)
        events = await _turn_with(api, stack, second, "SEARCHTOOLS what is my codename?")
        recalled = [e.data["data"] for e in events if e.event == "memory_recalled"]
        assert [m["content"] for m in recalled[0]["memories"]] == facts
        results = {
            e.data["data"]["tool_name"]: e.data["data"] for e in events if e.event == "tool_result"
        }
        assert results["search_conversations"]["success"], results
        assert "BLUEHERON" in results["search_conversations"]["output"]
        assert results["search_memory"]["success"], results
        assert "codename is BLUEHERON" in results["search_memory"]["output"]

        async with _other_user(stack, infra, "other-user") as other:
            theirs = await _session(other, on)
            events = await _turn_with(other, stack, theirs, "OTHERUSER what is my codename?")
            assert not [e for e in events if e.event == "memory_recalled"]
            found = [e.data["data"] for e in events if e.event == "tool_result"]
            assert found[0]["success"] and "BLUEHERON" not in found[0]["output"]
            assert await _facts(memory, stack, "other-user", "codename") == []
            await _extraction_done(
                memory, stack, await _persisted_request(other, theirs), user="other-user"
            )
        assert await _facts(memory, stack, "dev", "VERMILION") == []
    extraction_prompts = [
        str(r["messages"][-1]["content"])
        for r in await chat_requests(llm)
        if str(r["messages"][-1].get("content", "")).startswith("User: ")
    ]
    assert not [p for p in extraction_prompts if "NOMEMORY" in p]


async def _agent(api: httpx.AsyncClient, name: str, tools: list[str], *, memory: bool) -> str:
    body = {"name": name, "allowed_tools": tools, "memory_enabled": memory,
            "kb_selection_mode": "none"}  # fmt: skip
    agent = await api.post("/api/v1/agents", json=body)
    assert agent.status_code == 201, agent.text
    return str(agent.json()["id"])


async def _session(api: httpx.AsyncClient, agent_id: str) -> str:
    resp = await api.post("/api/v1/sessions", json={"agent_id": agent_id})
    assert resp.status_code == 201, resp.text
    return str(resp.json()["id"])


async def _extraction_done(
    memory: httpx.AsyncClient, stack: LocalStack, request_id: str, user: str = "dev"
) -> dict[str, Any]:
    """Wait for memory's own extraction of the turn (no one asks for it), asked as the
    turn's user (the stack's API key is the gateway's dev user)."""
    url = f"/internal/memories/extractions/{request_id}"
    async with asyncio.timeout(60):
        while True:
            resp = await memory.get(url, params={"tenant_id": stack.tenant, "user_id": user})
            if resp.status_code == 200 and resp.json()["status"] in ("done", "failed"):
                body: dict[str, Any] = resp.json()
                assert body["status"] == "done", body
                return body
            await asyncio.sleep(0.2)


async def _facts(memory: httpx.AsyncClient, stack: LocalStack, user: str, query: str) -> list[str]:
    resp = await memory.get(
        "/internal/memories/search",
        params={"tenant_id": stack.tenant, "user_id": user, "query": query},
    )
    assert resp.status_code == 200, resp.text
    return [m["content"] for m in resp.json()["memories"]]


@asynccontextmanager
async def _other_user(
    stack: LocalStack, infra: dict[str, str], user_id: str
) -> AsyncIterator[httpx.AsyncClient]:
    """A client of another user of the same tenant (its own API key)."""
    key = f"key-{secrets.token_hex(16)}"
    engine = create_async_engine(infra["WEFT_DATABASE_URL"])
    try:
        async with async_sessionmaker(engine).begin() as s:
            await s.execute(insert(ApiKey).values(
                id=secrets.token_hex(8), tenant_id=stack.tenant, user_id=user_id,
                key_hash=hash_key(key), name="other user",
            ))  # fmt: skip
    finally:
        await engine.dispose()
    headers = {"Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(base_url=stack.gateway_url, headers=headers, timeout=60) as c:
        yield c


async def _turn_with(
    api: httpx.AsyncClient, stack: LocalStack, session_id: str, query: str
) -> list[Any]:
    key = api.headers["Authorization"].removeprefix("Bearer ")  # this client's caller
    events = await read_turn(
        api, f"/api/v1/agent-chat/{session_id}", api_key=key, json_body={"query": query}
    )
    assert events[-1].data["data"]["status"] == "completed", events[-1].data
    return events


async def _persisted_request(api: httpx.AsyncClient, session_id: str) -> str:
    async with asyncio.timeout(30):
        while True:
            messages = (await api.get(f"/api/v1/sessions/{session_id}/messages")).json()
            done = [m for m in messages if m["role"] == "assistant" and m["is_completed"]]
            if done:
                return str(done[0]["request_id"])
            await asyncio.sleep(0.2)
