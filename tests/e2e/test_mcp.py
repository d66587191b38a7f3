"""MCP through the whole stack (SPEC T-19, H-01, H-06): a tenant registers real MCP
servers (the testkit's, streamable HTTP and SSE, on 127.0.0.1, which the test stack's
operator allowlist names), its agent discovers a tool, the engine publishes it, the call
runs in tool-exec under the approvals policy, and a server protected by OAuth is
authorised inside the conversation, then the call is retried.

Every test runs on the shared stack; the LLM is the scripted double, told which tools to
call. The MCP servers are started once for the module.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from weft_contracts import dynamic_tool_name
from weft_testkit import LocalStack
from weft_testkit import mcp_servers as kit

from tests.e2e.prompted_turn import PromptedTurn

SECRET = f"mcp-header-secret-{secrets.token_hex(4)}"


@pytest.fixture(scope="module")
def servers() -> Iterator[dict[str, Any]]:
    authority = kit.AuthorizationServer()
    authority.start()
    running = {
        "http": kit.start(kit.tools_server("kit"), "streamable_http"),
        "sse": kit.start(kit.tools_server("legacy"), "sse"),
        "protected": kit.protected_server(authority),
    }
    yield {**running, "authority": authority}
    for server in running.values():
        server.stop()
    authority.stop()


@pytest.fixture
async def script(llm: httpx.AsyncClient) -> httpx.AsyncClient:
    """The scripted LLM, reset to its demo policy before and after each test (the
    ``llm`` fixture): a script left behind would answer the next test's turns."""
    return llm


async def _register(
    api: httpx.AsyncClient, server: kit.RunningServer, **extra: Any
) -> dict[str, Any]:
    body = {"name": f"srv-{secrets.token_hex(3)}", "url": server.url,
            "transport": server.transport, **extra}  # fmt: skip
    made = await api.post("/api/v1/mcp/servers", json=body)
    assert made.status_code == 201, made.text
    view: dict[str, Any] = made.json()
    return view


async def _session(api: httpx.AsyncClient, server_ids: list[str], **agent: Any) -> str:
    body = {
        "name": f"mcp-{secrets.token_hex(3)}", "allowed_tools": ["thinking"],
        "kb_selection_mode": "none", "mcp_selection_mode": "selected",
        "mcp_services": server_ids, "access_level": "auto_write", **agent,
    }  # fmt: skip
    made = await api.post("/api/v1/agents", json=body)
    assert made.status_code == 201, made.text
    session = await api.post("/api/v1/sessions", json={"agent_id": made.json()["id"]})
    assert session.status_code == 201, session.text
    return str(session.json()["id"])


async def _script(
    script: httpx.AsyncClient, marker: str, rounds: list[list[dict[str, Any]]]
) -> None:
    """The model makes each round's calls in turn, then answers."""
    steps: list[dict[str, Any]] = [{"match": marker, "tool_calls": calls} for calls in rounds]
    steps.append({"match": marker, "content": "done"})
    assert (await script.post("/_script", json={"steps": steps})).status_code == 200


def _logged(stack: LocalStack) -> str:
    """Every log line the stack's processes wrote so far."""
    paths = [stack.log_path(name, port) for name, ports in stack.ports.items() for port in ports]
    return "\n".join(p.read_text(errors="replace") for p in paths if p.exists())


async def _approve(api: httpx.AsyncClient, prompt: dict[str, Any]) -> None:
    answer = await api.post(f"/api/v1/agent/prompts/{prompt['prompt_id']}",
                            json={"decision": "approve"})  # fmt: skip
    assert answer.status_code == 200, answer.text


async def test_a_registered_tool_is_described_published_asked_about_and_called(
    stack: LocalStack, api: httpx.AsyncClient, script: httpx.AsyncClient,
    servers: dict[str, Any],
) -> None:  # fmt: skip  # SPEC T-19, T-01, H-01
    server = await _register(api, servers["http"], headers={"X-Api-Secret": SECRET})
    assert server["status"] == "ok" and server["header_names"] == ["X-Api-Secret"], server
    assert SECRET not in json.dumps(server)
    tools = (await api.get(f"/api/v1/mcp/servers/{server['id']}/tools")).json()
    echo = next(t for t in tools if t["tool_name"] == "echo")
    assert (echo["risk"], echo["always_ask"]) == ("write", True), "the defaults of an MCP tool"
    name = dynamic_tool_name(server["id"], server["name"], "echo")
    assert echo["name"] == name

    sid = await _session(api, [server["id"]])
    marker = f"MCP-ECHO-{secrets.token_hex(3)}"
    await _script(script, marker, [
        [{"id": "d1", "name": "discover_mcp_tools",
          "arguments": {"mode": "describe", "server_id": server["id"], "tool_name": "echo"}}],
        [{"id": "c1", "name": name, "arguments": {"text": "hello through mcp"}}],
    ])  # fmt: skip
    turn = PromptedTurn(api, sid, f"{marker} please")
    prompt = await turn.prompt()  # always ask, even at auto_write (H-01)
    assert prompt["tool_name"] == name and prompt["always_ask"] and prompt["risk"] == "write"
    assert [r["call_id"] for r in turn.of("tool_result")] == ["d1"], "nothing ran unapproved"
    await _approve(api, prompt)
    await turn.done()

    results = {r["call_id"]: r for r in turn.of("tool_result")}
    assert results["d1"]["success"], results["d1"]
    assert results["c1"]["success"] and "hello through mcp" in results["c1"]["output"]
    assert turn.of("complete")[0]["status"] == "completed"
    streamed = json.dumps(turn.events)
    assert SECRET not in streamed, "a registration's header never reaches an event"
    assert SECRET not in _logged(stack), "nor a log line of any process"


async def test_a_read_only_tool_over_sse_runs_without_asking(
    api: httpx.AsyncClient, script: httpx.AsyncClient, servers: dict[str, Any]
) -> None:  # SPEC T-19, H-01 (the tenant's flags decide the risk)
    server = await _register(api, servers["sse"])
    assert server["status"] == "ok", server
    flagged = await api.patch(f"/api/v1/mcp/servers/{server['id']}/tools/add",
                              json={"read_only": True, "always_ask": False})  # fmt: skip
    assert flagged.status_code == 200, flagged.text
    name = dynamic_tool_name(server["id"], server["name"], "add")
    sid = await _session(api, [server["id"]], access_level="read_only")
    marker = f"MCP-ADD-{secrets.token_hex(3)}"
    await _script(script, marker, [
        [{"id": "d1", "name": "discover_mcp_tools",
          "arguments": {"mode": "describe", "server_id": server["id"], "tool_name": "add"}}],
        [{"id": "c1", "name": name, "arguments": {"a": 2, "b": 40}}],
        [{"id": "c2", "name": dynamic_tool_name(server["id"], server["name"], "echo"),
          "arguments": {"text": "never described, never offered"}}],
    ])  # fmt: skip
    turn = PromptedTurn(api, sid, f"{marker} please")
    await turn.done()
    assert turn.of("tool_approval_required") == []
    results = {r["call_id"]: r for r in turn.of("tool_result")}
    assert results["c1"]["success"] and "42" in results["c1"]["output"], results["c1"]
    assert not results["c2"]["success"] and "not available" in results["c2"]["error"], (
        "A-08: a tool the turn did not publish never leaves the engine"
    )


async def test_oauth_inside_the_conversation_then_the_call_runs(
    stack: LocalStack, api: httpx.AsyncClient, script: httpx.AsyncClient,
    servers: dict[str, Any],
) -> None:  # fmt: skip  # SPEC H-06
    server = await _register(api, servers["protected"])
    assert server["status"] == "authorization_required", server
    sid = await _session(api, [server["id"]], mcp_auth_wait_timeout=1800)
    marker = f"MCP-OAUTH-{secrets.token_hex(3)}"
    await _script(script, marker, [
        [{"id": "c1", "name": "call_mcp_tool",
          "arguments": {"tool_ref": f"{server['id']}/echo",
                        "arguments": {"text": "after consent"}}}],
    ])  # fmt: skip
    turn = PromptedTurn(api, sid, f"{marker} please")
    asked = await turn.prompt()  # a tool the turn never saw described: always asked (H-01)
    assert asked["kind"] == "approval" and asked["risk"] == "destructive"
    await _approve(api, asked)
    consent = await turn.prompt()
    assert consent["kind"] == "mcp_authorization" and consent["call_id"] == "c1"
    assert consent["timeout_s"] == 1800, "the agent's mcp_auth_wait_timeout"
    url = consent["authorization_url"]
    assert url.startswith(servers["authority"].base_url + "/authorize?"), url

    # The user's browser: the authorisation server approves at once and redirects to the
    # gateway's callback, which completes the flow and resumes the call.
    async with httpx.AsyncClient(follow_redirects=True, timeout=60) as browser:
        page = await browser.get(url)
    assert page.status_code == 200 and "Authorised" in page.text, page.text
    assert str(page.url).startswith(stack.url("gateway") + "/api/v1/mcp/oauth/callback")
    async with httpx.AsyncClient(follow_redirects=True, timeout=60) as browser:
        replay = await browser.get(str(page.url))
    assert replay.status_code == 400, "the state works once"

    await turn.done()
    resolved = [r for r in turn.of("tool_approval_resolved") if r["call_id"] == "c1"]
    assert [r["outcome"] for r in resolved] == ["approved", "approved"]
    (result,) = [r for r in turn.of("tool_result") if r["call_id"] == "c1"]
    assert result["success"] and "after consent" in result["output"], result
    again = await api.get(f"/api/v1/mcp/servers/{server['id']}")
    assert "access_token" not in again.text and "at-" not in again.text
    issued = [*servers["authority"].tokens, *servers["authority"].refresh_tokens]
    assert issued, "the authorisation server issued the user's tokens"
    shown, logged = json.dumps(turn.events), _logged(stack)
    for token in issued:
        assert token not in shown and token not in logged, "a user's token stays internal"
