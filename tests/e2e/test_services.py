"""Every service answers health and readiness; placeholders say "not available yet"."""

from __future__ import annotations

import httpx
import pytest
from weft_testkit import LocalStack, chat_requests, read_turn
from weft_testkit.stack import SERVICES


@pytest.mark.parametrize("service", SERVICES)
async def test_service_is_ready_with_all_dependencies(stack: LocalStack, service: str) -> None:
    async with httpx.AsyncClient(base_url=stack.url(service)) as client:
        assert (await client.get("/healthz")).status_code == 200
        ready = await client.get("/readyz")
    assert ready.status_code == 200
    # The engine opens no database (its budget comes with the turn) and vouches that Redis
    # still holds the turns' state (TurnAuditor).
    if service == "engine":
        expected = {"kafka": "ok", "redis": "ok", "turn_state": "ok"}
    else:
        expected = {"kafka": "ok", "postgres": "ok", "redis": "ok"}
    assert ready.json()["checks"] == expected


async def test_suggestions_routes_want_a_credential(stack: LocalStack) -> None:
    """The suggestions API is internal (SPEC Q-05): no credential, no answer."""
    async with httpx.AsyncClient(base_url=stack.url("suggestions")) as client:
        resp = await client.get(
            "/internal/sessions/s1/suggestions",
            params={"tenant_id": "t", "user_id": "u", "assistant_message_id": "m1a"},
        )
    assert resp.status_code == 401


async def test_sandbox_tool_call_gets_a_readable_refusal(
    api: httpx.AsyncClient, stack: LocalStack, llm: httpx.AsyncClient
) -> None:  # SPEC A-08
    """An agent whose tools do not include shell_exec is not offered it, so the engine
    refuses the call with a result the model reads. Sandbox turns that run it:
    tests/e2e/test_sandbox_turns.py."""
    script = {"steps": [
        {"match": "run ls", "tool_calls": [{"name": "shell_exec", "arguments": {"command": "ls"}}]},
        {"match": "run ls", "content": "The sandbox is not available, sorry."},
    ]}  # fmt: skip
    assert (await llm.post("/_script", json=script)).status_code == 200
    session = (
        await api.post("/api/v1/sessions", json={"agent_id": "builtin-smart-reasoning"})
    ).json()
    events = await read_turn(
        api, f"/api/v1/agent-chat/{session['id']}", api_key=stack.api_key,
        json_body={"query": "please run ls"},
    )  # fmt: skip
    result = next(e for e in events if e.event == "tool_result").data["data"]
    assert result["tool_name"] == "shell_exec" and not result["success"]
    assert "is not available to this agent" in result["error"]
    complete = events[-1].data["data"]
    assert complete["status"] == "completed"
    assert complete["final_answer"] == "The sandbox is not available, sorry."
    tool_message = (await chat_requests(llm))[-1]["messages"][-1]
    assert tool_message["role"] == "tool" and "not available" in tool_message["content"]
