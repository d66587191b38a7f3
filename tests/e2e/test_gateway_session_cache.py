"""The chat path's session lookup through the whole stack (SPEC C-01, C-02; invariants 5, 6):
facts cached in Redis on create, replaced on update, tombstoned on delete; another
tenant's session is 404; with memory down a cached session still accepts chat while an
uncached one is 503 with Retry-After and the reason."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator

import httpx
import pytest
from weft_testkit import LocalStack, read_turn

from tests.e2e.test_tenants_isolation import register_key

AGENT = "builtin-smart-reasoning"


@pytest.fixture
async def tenant_b(stack: LocalStack, infra: dict[str, str]) -> AsyncIterator[httpx.AsyncClient]:
    """A client of a second tenant on the same stack."""
    key = f"key-{secrets.token_hex(16)}"
    await register_key(infra["WEFT_DATABASE_URL"], f"tenant-b-{secrets.token_hex(4)}", key)
    headers = {"Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(base_url=stack.gateway_url, headers=headers, timeout=60) as c:
        yield c


async def _session(api: httpx.AsyncClient, agent_id: str | None = AGENT) -> str:
    created = await api.post("/api/v1/sessions", json={"agent_id": agent_id})
    assert created.status_code == 201, created.text
    return str(created.json()["id"])


async def _chat_status(api: httpx.AsyncClient, session_id: str) -> tuple[int, str, dict[str, str]]:
    """Status, content type and headers of a chat POST; the stream itself is not read."""
    url = f"/api/v1/agent-chat/{session_id}"
    async with api.stream("POST", url, json={"query": "hello"}) as resp:
        body = "" if resp.status_code == 200 else (await resp.aread()).decode()
        return resp.status_code, body, dict(resp.headers)


async def test_chat_after_delete_is_404_at_once(api: httpx.AsyncClient) -> None:
    """A session deleted through the gateway is not chat-able, stoppable or steerable, even
    though its facts were cached when it was created."""
    session_id = await _session(api)
    assert (await api.get(f"/api/v1/sessions/{session_id}")).status_code == 200
    assert (await api.delete(f"/api/v1/sessions/{session_id}")).status_code == 204
    status, body, _ = await _chat_status(api, session_id)
    assert status == 404 and session_id in body
    stop = await api.post(f"/api/v1/sessions/{session_id}/stop")
    steer = await api.post(f"/api/v1/sessions/{session_id}/steer", json={"content": "x"})
    assert (stop.status_code, steer.status_code) == (404, 404)
    assert (await api.delete(f"/api/v1/sessions/{session_id}")).status_code == 404


async def test_an_update_changes_the_agent_the_next_chat_uses(api: httpx.AsyncClient) -> None:
    """PATCH replaces the cached facts: the next chat resolves the new agent (an agent
    deleted after the PATCH, so agent-config's 404 proves which agent was asked for)."""
    session_id = await _session(api)
    agent = await api.post(
        "/api/v1/agents", json={"name": "soon gone", "kb_selection_mode": "none"}
    )
    assert agent.status_code == 201, agent.text
    agent_id = agent.json()["id"]
    patched = await api.patch(f"/api/v1/sessions/{session_id}", json={"agent_id": agent_id})
    assert patched.status_code == 200, patched.text
    assert (await api.delete(f"/api/v1/agents/{agent_id}")).status_code == 204
    status, body, _ = await _chat_status(api, session_id)
    assert status == 404 and agent_id in body


async def test_another_tenant_cannot_chat_on_a_cached_session(
    api: httpx.AsyncClient, tenant_b: httpx.AsyncClient
) -> None:
    """Invariant 5: the owner's cached facts never answer another tenant."""
    session_id = await _session(api)
    status, _, _ = await _chat_status(tenant_b, session_id)
    assert status == 404
    assert (await tenant_b.delete(f"/api/v1/sessions/{session_id}")).status_code == 404
    assert (await api.get(f"/api/v1/sessions/{session_id}")).status_code == 200


async def test_memory_down_cached_session_chats_uncached_is_503(
    api: httpx.AsyncClient, stack: LocalStack, llm: httpx.AsyncClient
) -> None:
    """Chat no longer needs memory per message; a lookup that does need it fails fast
    with 503, Retry-After and the reason instead of a 500 or a hang. (The accepted turn
    is followed to its end, with memory back, so it leaves nothing running for later
    tests; ``llm`` resets the scripted model's request log after it.)"""
    cached = await _session(api)
    async with stack.internal_client("memory") as memory:
        behind = await memory.post(  # created in memory directly: the gateway never saw it
            "/internal/sessions",
            json={"tenant_id": stack.tenant, "user_id": "dev", "agent_id": AGENT},
        )
    assert behind.status_code == 201, behind.text
    stack.kill("memory")
    try:
        status, body, headers = await _chat_status(api, behind.json()["id"])
        assert status == 503 and "memory unavailable" in body
        assert headers["retry-after"] == "2"
        status, _, headers = await _chat_status(api, cached)
        assert status == 200 and headers["content-type"].startswith("text/event-stream")
    finally:
        stack.start_again("memory")
    events = await read_turn(
        api, f"/api/v1/sessions/{cached}/stream", api_key=stack.api_key, method="GET"
    )
    assert events[-1].event == "complete"  # an answer, or history_unavailable: never a hang


async def test_a_turn_whose_history_memory_cannot_give_ends_with_history_unavailable(
    api: httpx.AsyncClient, stack: LocalStack
) -> None:
    """SPEC E-04 with memory down: the engine cannot read the session's history, so the
    turn ends at once with an explicit ``history_unavailable`` error and one ``complete``,
    never an answer without the history and never a hang."""
    session_id = await _session(api)
    stack.kill("memory")
    try:
        events = await read_turn(
            api, f"/api/v1/agent-chat/{session_id}", api_key=stack.api_key,
            json_body={"query": "hello"}, timeout_s=60,
        )  # fmt: skip
    finally:
        stack.start_again("memory")
    types = [e.event for e in events]
    assert types == ["turn_started", "error", "complete"], types
    error = events[1].data["data"]
    assert error["code"] == "history_unavailable" and "memory" in error["message"], error
    assert events[-1].data["data"]["status"] == "failed"
