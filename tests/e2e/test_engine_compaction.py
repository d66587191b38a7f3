"""The engine compacts a long conversation before the LLM call and the next turn starts
from the stored checkpoint (SPEC M-03..M-07, E-05), through the whole stack."""

from __future__ import annotations

import httpx
from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine
from weft_storage.models import Agent
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
    import asyncio

    async with asyncio.timeout(30):
        while True:
            messages = (await api.get(f"/api/v1/sessions/{session_id}/messages")).json()
            items = messages if isinstance(messages, list) else messages.get("items", [])
            if sum(1 for m in items if m["role"] == "user" or m["status"] != "running") >= count:
                return
            await asyncio.sleep(0.2)
