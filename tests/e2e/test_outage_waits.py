"""A brief outage of memory is waited out, not failed: on the shared stack, memory is
killed just before a turn opens and started again while the engine waits for the turn's
history; the turn completes and both its messages are stored."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
from weft_testkit import LocalStack, read_turn

AGENT = "builtin-smart-reasoning"


async def _stored(api: httpx.AsyncClient, session_id: str) -> list[dict[str, Any]]:
    """The session's messages once both rows are there and the answer is no longer
    running (memory persists from Kafka, after its restart)."""
    messages: list[dict[str, Any]] = []
    for _ in range(300):  # up to 60 s
        resp = await api.get(f"/api/v1/sessions/{session_id}/messages")
        messages = resp.json() if resp.status_code == 200 else []
        if len(messages) == 2 and messages[1]["status"] != "running":
            break
        await asyncio.sleep(0.2)
    return messages


def _engine_retries(stack: LocalStack) -> int:
    """How many times the engine tried memory again, from its log."""
    log = stack.log_path("engine", stack.ports["engine"][0])
    return log.read_text(errors="replace").count("internal_call_retry")


async def test_a_memory_restart_while_a_turn_opens_is_waited_out(
    api: httpx.AsyncClient, stack: LocalStack, llm: httpx.AsyncClient
) -> None:  # SPEC M-08
    await llm.post("/_script", json={"steps": [{"match": "OUTAGE", "content": "still here"}]})
    resp = await api.post("/api/v1/sessions", json={"title": "outage", "agent_id": AGENT})
    assert resp.status_code == 201, resp.text
    session_id = resp.json()["id"]  # known to the gateway now: chat needs no lookup
    retries_before = _engine_retries(stack)

    stack.kill("memory")
    try:
        chat = read_turn(
            api, f"/api/v1/agent-chat/{session_id}", api_key=stack.api_key,
            json_body={"query": "OUTAGE: are you there?"}, timeout_s=120,
        )  # fmt: skip
        turn = asyncio.create_task(chat)
        for _ in range(300):  # up to 60 s: the history call meets the outage and retries
            if _engine_retries(stack) > retries_before or turn.done():
                break
            await asyncio.sleep(0.2)
    finally:
        await asyncio.to_thread(stack.start_again, "memory")
    events = await turn

    assert "error" not in [e.event for e in events], events[-2:]
    assert _engine_retries(stack) > retries_before, "the turn never met the outage"
    complete = events[-1].data["data"]
    assert complete["status"] == "completed" and complete["final_answer"] == "still here"
    user, assistant = await _stored(api, session_id)
    assert (user["role"], user["content"]) == ("user", "OUTAGE: are you there?")
    assert (assistant["content"], assistant["status"]) == ("still here", "completed")
