"""The engine compacts a long conversation before the LLM call and the next turn starts
from the stored checkpoint (SPEC M-03..M-08, E-05), through the whole stack: the second
compaction merges the first summary, a restarted engine resumes from the checkpoint without
summarising again, and deleting messages through the gateway drops the checkpoints that
covered them."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine
from weft_context.summary import summary_text
from weft_storage.agent_config.models import Agent
from weft_testkit import LocalStack, chat_requests, infra_env, read_turn

SMALL_WINDOW_AGENT = "e2e-small-window"


async def _small_window_agent(tenant: str) -> None:
    engine = create_async_engine(infra_env()["WEFT_DATABASE_URL"])
    config = {"allowed_tools": [], "context_window": 20_000, "mode": "smart-reasoning"}
    async with async_sessionmaker(engine).begin() as s:
        if await s.get(Agent, (tenant, SMALL_WINDOW_AGENT)) is None:
            s.add(Agent(tenant_id=tenant, id=SMALL_WINDOW_AGENT, name="small", config=config))
    await engine.dispose()


async def test_long_conversation_is_compacted_and_resumes_from_the_checkpoint(
    api: httpx.AsyncClient, stack: LocalStack, llm: httpx.AsyncClient
) -> None:
    await _small_window_agent(stack.tenant)
    session = (await api.post("/api/v1/sessions", json={"agent_id": SMALL_WINDOW_AGENT})).json()
    url = f"/api/v1/agent-chat/{session['id']}"
    filler = " ".join(f"fact{i} is about topic {i % 7}." for i in range(400))  # ~2.5k tokens
    compacted = []
    for turn in range(4):
        events = await read_turn(
            api, url, api_key=stack.api_key, json_body={"query": f"Turn {turn}: {filler}"}
        )
        assert events[-1].data["data"]["status"] == "completed"
        compacted += [e.data["data"] for e in events if e.event == "context_compacted"]
        await _stored(api, session["id"], 2 * (turn + 1))
    assert compacted, "the window of 20k tokens (threshold ~3.6k) was crossed but nothing compacted"
    assert compacted[0]["tokens_after"] < compacted[0]["tokens_before"]
    last_chat = (await chat_requests(llm))[-1]
    contents = [str(m.get("content")) for m in last_chat["messages"]]
    assert not any("Turn 0:" in c for c in contents), "the oldest turn was replayed verbatim"


async def _stored(api: httpx.AsyncClient, session_id: str, count: int) -> None:
    async with asyncio.timeout(30):
        while True:
            messages = (await api.get(f"/api/v1/sessions/{session_id}/messages")).json()
            items = messages if isinstance(messages, list) else messages.get("items", [])
            if sum(1 for m in items if m["role"] == "user" or m["status"] != "running") >= count:
                return
            await asyncio.sleep(0.2)


def _summary_prompts(requests: list[dict[str, Any]]) -> list[str]:
    return [
        str(r["messages"][-1].get("content"))
        for r in requests
        if "<transcript>" in str(r["messages"][-1].get("content", ""))
    ]


async def _memory_history(stack: LocalStack, session_id: str) -> dict[str, Any]:
    async with stack.internal_client("memory", timeout=30) as memory:
        resp = await memory.get(
            f"/internal/sessions/{session_id}/history",
            # The session's owner: the stack's API key is the gateway's dev user.
            params={"tenant_id": stack.tenant, "user_id": "dev", "token_budget": 20_000},
        )
    assert resp.status_code == 200, resp.text
    body: dict[str, Any] = resp.json()
    return body


async def test_second_compaction_merges_the_first_and_a_restarted_engine_resumes(
    api: httpx.AsyncClient, stack: LocalStack, llm: httpx.AsyncClient
) -> None:
    # SPEC M-04 (merge), M-07 (checkpoint), M-08 (reload from it), invariant 2 (any engine).
    await _small_window_agent(stack.tenant)
    steps: list[dict[str, Any]] = [
        {"match": "<transcript>", "content": "SUMMARY-ONE: turn 0 listed facts."},
        {"match": "<transcript>", "content": "SUMMARY-TWO: turns 0 and 1 listed facts."},
        *({"match": f"Turn {i}:", "content": f"Noted turn {i}."} for i in range(4)),
    ]
    assert (await llm.post("/_script", json={"steps": steps})).status_code == 200
    session = (await api.post("/api/v1/sessions", json={"agent_id": SMALL_WINDOW_AGENT})).json()
    url = f"/api/v1/agent-chat/{session['id']}"
    filler = " ".join(f"fact{i} is about topic {i % 7}." for i in range(300))  # ~2.4k tokens
    compacted = []
    for turn in range(3):  # threshold ~3.6k: turns 1 and 2 each push the request over it
        events = await read_turn(
            api, url, api_key=stack.api_key, json_body={"query": f"Turn {turn}: {filler}"}
        )
        assert events[-1].data["data"]["status"] == "completed", events[-1].data
        compacted += [e.data["data"] for e in events if e.event == "context_compacted"]
        await _stored(api, session["id"], 2 * (turn + 1))
    assert len(compacted) == 2, compacted
    prompts = _summary_prompts(await chat_requests(llm))
    assert len(prompts) == 2
    assert "SUMMARY-ONE" not in prompts[0]
    assert "<previous_summary>\nSUMMARY-ONE" in prompts[1]  # the second merges the first
    stored = await _memory_history(stack, session["id"])
    assert stored["summary"].startswith("SUMMARY-TWO")

    stack.kill("engine")  # SIGKILL: nothing survives but Kafka, Redis and PostgreSQL
    await asyncio.to_thread(stack.start_again, "engine")
    seen = len(await chat_requests(llm))
    events = await read_turn(
        api, url, api_key=stack.api_key, json_body={"query": "Turn 3: what was fact5 about?"}
    )
    assert events[-1].data["data"]["status"] == "completed", events[-1].data
    assert not [e for e in events if e.event == "context_compacted"]
    after = (await chat_requests(llm))[seen:]
    assert after and _summary_prompts(after) == []  # no re-summarisation after the restart
    sent = after[0]["messages"]
    assert summary_text(sent[1]) == stored["summary"]  # right after the system prompt
    assert not any("Turn 0:" in str(m.get("content")) for m in sent)
    assert not any("Turn 1:" in str(m.get("content")) for m in sent)
    await _stored(api, session["id"], 8)

    # SPEC M-07: deleting turn 1 (through the gateway) drops SUMMARY-TWO, stored on it;
    # SUMMARY-ONE (turn 0) still holds. Rolling back from turn 0 leaves no checkpoint.
    messages = (await api.get(f"/api/v1/sessions/{session['id']}/messages")).json()
    by_turn = [m for m in messages if m["role"] == "user"]
    deleted = await api.delete(f"/api/v1/sessions/{session['id']}/messages/{by_turn[1]['id']}")
    assert deleted.status_code == 204, deleted.text
    reloaded = await _memory_history(stack, session["id"])
    assert reloaded["summary"].startswith("SUMMARY-ONE")
    assert [t["request_id"] for t in reloaded["turns"]] == [
        m["request_id"] for m in (by_turn[2], by_turn[3])
    ]
    rolled = await api.delete(
        f"/api/v1/sessions/{session['id']}/messages", params={"from": by_turn[0]["id"]}
    )
    assert rolled.status_code == 204, rolled.text
    empty = await _memory_history(stack, session["id"])
    assert empty["summary"] is None and empty["turns"] == []
