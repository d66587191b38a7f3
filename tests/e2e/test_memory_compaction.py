"""A long conversation crosses the compaction threshold twice on the running stack
(SPEC M-03 .. M-08): turns go through gateway -> engine -> scripted LLM -> agent.events ->
memory; the compactor (weft_context, as the engine runs it) summarises through the scripted
LLM over HTTP and stores checkpoints in memory; the second compaction merges the first
summary; a fresh loader (a restarted engine) starts from the latest checkpoint and does not
summarise again."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
from httpx_sse import aconnect_sse
from weft_context.compaction import CompactionSettings, Compactor
from weft_context.summary import summary_text
from weft_context.tokens import TokenEstimator
from weft_llm import OpenAIChatModel
from weft_testkit import LocalStack, chat_requests, read_turn

AGENT = "builtin-smart-reasoning"
SYSTEM = {"role": "system", "content": "You are a helpful assistant."}
SETTINGS = CompactionSettings(model="weft-scripted", context_window=20_000, completion_budget=512)


def _answer(i: int) -> str:
    return f"Answer about topic{i}: " + " ".join(f"detail{i}-{k}" for k in range(700))


async def _persisted(api: httpx.AsyncClient, session_id: str, turns: int) -> None:
    async with asyncio.timeout(60):
        while True:
            messages = (await api.get(f"/api/v1/sessions/{session_id}/messages")).json()
            done = [m for m in messages if m["role"] == "assistant" and m["is_completed"]]
            if len(done) >= turns:
                return
            await asyncio.sleep(0.2)


async def _turns(
    api: httpx.AsyncClient, stack: LocalStack, session_id: str, first: int, last: int
) -> None:
    for i in range(first, last):
        events = await read_turn(
            api, f"/api/v1/agent-chat/{session_id}", api_key=stack.api_key,
            json_body={"query": f"Tell me about topic{i}."},
        )  # fmt: skip
        assert events[-1].data["data"]["status"] == "completed", events[-1].data
    await _persisted(api, session_id, last)


async def _compact_and_checkpoint(
    memory: httpx.AsyncClient, stack: LocalStack, session_id: str, question: str
) -> tuple[Any, dict[str, Any]]:
    """What the engine does before Think: load history, compact, persist the checkpoint."""
    history = (
        await memory.get(
            f"/internal/sessions/{session_id}/history",
            params={"tenant_id": stack.tenant, "token_budget": SETTINGS.context_window},
        )
    ).json()
    messages = [SYSTEM, *history["messages"], {"role": "user", "content": question}]
    turn_ids: list[str | None] = [None] * len(messages)
    for turn in history["turns"]:
        for k in range(turn["start"], turn["start"] + turn["count"]):
            turn_ids[1 + k] = turn["turn_id"]
    model = OpenAIChatModel(base_url=f"{stack.llm_url}/v1", api_key="scripted-llm-test-double")
    try:
        result = await Compactor(model, SETTINGS, TokenEstimator()).compact(messages, turn_ids)
    finally:
        await model.aclose()
    if result.checkpoint is not None:
        stored = await memory.put(
            f"/internal/sessions/{session_id}/turns/{result.checkpoint.turn_id}/context",
            params={"tenant_id": stack.tenant},
            json={"summary": result.checkpoint.summary, "degraded": result.checkpoint.degraded,
                  "tokens_before": result.tokens_before, "tokens_after": result.tokens_after},
        )  # fmt: skip
        assert stored.status_code == 204, stored.text
    return result, history


async def test_two_compactions_merge_and_a_fresh_loader_resumes(
    api: httpx.AsyncClient, llm: httpx.AsyncClient, stack: LocalStack
) -> None:
    steps: list[dict[str, Any]] = [{"match": f"topic{i}.", "content": _answer(i)} for i in range(8)]
    steps += [
        {"match": "<transcript>", "content": "SUMMARY-ONE: topics 0-2 were discussed."},
        {"match": "<transcript>", "content": "SUMMARY-TWO: topics 0-6 were discussed."},
    ]
    assert (await llm.post("/_script", json={"steps": steps})).status_code == 200
    session_id = (await api.post("/api/v1/sessions", json={"agent_id": AGENT})).json()["id"]
    async with httpx.AsyncClient(base_url=stack.url("memory"), timeout=60) as memory:
        await _turns(api, stack, session_id, 0, 4)
        first, _ = await _compact_and_checkpoint(memory, stack, session_id, "next?")
        assert first.compacted and first.checkpoint is not None
        assert first.tokens_after < first.tokens_before

        await _turns(api, stack, session_id, 4, 8)
        second, history = await _compact_and_checkpoint(memory, stack, session_id, "and now?")
        assert history["summary"].startswith("SUMMARY-ONE")  # reload started at checkpoint 1
        assert second.compacted and second.checkpoint is not None
        assert second.checkpoint.summary.startswith("SUMMARY-TWO")
        prompts = [
            r["messages"][-1]["content"]
            for r in await chat_requests(llm)
            if "<transcript>" in str(r["messages"][-1].get("content", ""))
        ]
        assert len(prompts) == 2
        assert "<previous_summary>\nSUMMARY-ONE" in prompts[1]  # SPEC M-04: merged

        # A restarted engine: nothing in memory but the database.
        resumed, history = await _compact_and_checkpoint(memory, stack, session_id, "last?")
        assert summary_text(history["messages"][0]) == second.checkpoint.summary
        assert history["checkpoint_turn_id"] == second.checkpoint.turn_id
        assert not resumed.compacted and resumed.checkpoint is None  # no re-summarising
        requests = await chat_requests(llm)
        assert sum("<transcript>" in str(r["messages"][-1]) for r in requests) == 2

        found = await memory.get(
            "/internal/conversations/search",
            params={"tenant_id": stack.tenant, "user_id": "dev", "query": "topic5"},
        )
        assert any("topic5" in r["snippet"] for r in found.json()["results"])  # SPEC T-17


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
    async with httpx.AsyncClient(base_url=stack.url("memory"), timeout=30) as memory:
        row = (
            await memory.get(
                f"/internal/sessions/{session_id}/messages", params={"tenant_id": stack.tenant}
            )
        ).json()[-1]
    assert row["is_partial"] is True


async def test_memory_tools_run_in_tool_exec_in_the_callers_scope(
    api: httpx.AsyncClient, llm: httpx.AsyncClient, stack: LocalStack
) -> None:
    # SPEC T-17 / M-10: facts extracted after a turn; search_memory and search_conversations
    # called by the model, executed by tool-exec against memory, scoped to the caller.
    agent = await api.post(
        "/api/v1/agents",
        json={"name": "memory e2e", "allowed_tools": ["search_conversations"],
              "memory_enabled": True, "kb_selection_mode": "none"},
    )  # fmt: skip
    assert agent.status_code == 201, agent.text
    agent_id = agent.json()["id"]
    steps: list[dict[str, Any]] = [
        {"match": "codename is BLUEHERON", "content": "Noted."},
        {"match": "User: My project", "content": '["The user\'s project codename is BLUEHERON."]'},
        {"match": "SEARCHTOOLS", "tool_calls": [
            {"name": "search_conversations", "arguments": {"query": "BLUEHERON codename"}},
            {"name": "search_memory", "arguments": {"query": "project codename"}},
        ]},
        {"match": "SEARCHTOOLS", "content": "Your codename is BLUEHERON."},
    ]  # fmt: skip
    assert (await llm.post("/_script", json={"steps": steps})).status_code == 200
    first = (await api.post("/api/v1/sessions", json={"agent_id": agent_id})).json()["id"]
    await _turn_with(api, stack, first, "My project codename is BLUEHERON.")
    request_id = await _persisted_request(api, first)
    async with httpx.AsyncClient(base_url=stack.url("memory"), timeout=30) as memory:
        body = {"tenant_id": stack.tenant, "user_id": "dev", "session_id": first,
                "request_id": request_id}  # fmt: skip
        extracted = await memory.post("/internal/memories/extract", json=body)
        assert extracted.status_code == 200 and len(extracted.json()["memory_ids"]) == 1

    second = (await api.post("/api/v1/sessions", json={"agent_id": agent_id})).json()["id"]
    events = await _turn_with(api, stack, second, "SEARCHTOOLS what is my codename?")
    results = {
        e.data["data"]["tool_name"]: e.data["data"] for e in events if e.event == "tool_result"
    }
    assert results["search_conversations"]["success"], results
    assert "BLUEHERON" in results["search_conversations"]["output"]
    assert results["search_memory"]["success"], results
    assert "codename is BLUEHERON" in results["search_memory"]["output"]


async def _turn_with(
    api: httpx.AsyncClient, stack: LocalStack, session_id: str, query: str
) -> list[Any]:
    events = await read_turn(
        api, f"/api/v1/agent-chat/{session_id}", api_key=stack.api_key,
        json_body={"query": query},
    )  # fmt: skip
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
