"""A server that repeats the secrets Weft sends it (SPEC T-19: a registration's headers and
a user's OAuth token never travel in a tool result, an event or a stored tool list).

The kit's ``leaky_server`` echoes the request's headers in a result's text, in structured
content, in an error and in its tool descriptions, over both transports; tool-exec's
caller and agent-config's listing must scrub them before anything leaves.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import AsyncIterator, Iterator
from ipaddress import ip_network
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from fastapi.responses import JSONResponse
from weft_agent_config.mcp.remote import McpRemote
from weft_contracts import ToolContext
from weft_contracts.mcp import McpCatalog, McpConnection, McpServerCatalog
from weft_mcp_client.redaction import REDACTED
from weft_mcp_client.safe_http import AddressPolicy
from weft_mcp_client.session import list_server_tools, tool_def
from weft_mcp_client.transport import pinned_client_factory
from weft_testkit import mcp_servers as kit
from weft_tool_catalog.registry import ToolInvocation, ToolOutcome
from weft_tools.mcp_calls import McpCaller
from weft_tools.mcp_directory import HttpMcpDirectory
from weft_tools.mcp_pool import McpSessionPool

POLICY = AddressPolicy(allowed_networks=(ip_network("127.0.0.1/32"),))
FACTORY = pinned_client_factory(POLICY)
API_KEY = f"sk-live-{secrets.token_hex(12)}"
TOKEN = f"at-{secrets.token_hex(16)}"


@pytest.fixture(scope="module", params=["streamable_http", "sse"])
def leaky(request: pytest.FixtureRequest) -> Iterator[kit.RunningServer]:
    running = kit.start(kit.leaky_server(), request.param)
    yield running
    running.stop()


def connection(server: kit.RunningServer) -> McpConnection:
    return McpConnection(
        server_id="leaky-1", server_name="leaky", url=server.url, transport=server.transport,
        headers={"X-Api-Key": API_KEY, "X-Region": "eu"}, access_token=TOKEN,
    )  # fmt: skip


@pytest.fixture
async def caller(leaky: kit.RunningServer) -> AsyncIterator[McpCaller]:
    conn = connection(leaky)
    listed = await list_server_tools(conn, factory=FACTORY, timeout_s=10, max_tools=20)
    tools = [tool_def("leaky-1", "leaky", t, read_only=True, always_ask=False)
             for t in listed.tools]  # fmt: skip
    catalog = McpCatalog(servers=[McpServerCatalog(id="leaky-1", name="leaky", tools=tools)])
    app = FastAPI()
    app.get("/internal/mcp/catalog")(lambda: JSONResponse(catalog.model_dump(mode="json")))
    app.get("/internal/mcp/servers/{server_id}/connection")(
        lambda server_id: JSONResponse(conn.model_dump(mode="json"))
    )
    directory = HttpMcpDirectory("http://agent-config", transport=httpx.ASGITransport(app=app))
    mcp = McpCaller(directory, McpSessionPool(FACTORY, idle_s=30), request_timeout_s=5)
    yield mcp
    await mcp.pool.close()


def invocation(ref: str) -> ToolInvocation:
    context = ToolContext(user_id="u1", agent_id="a1", mcp_server_ids=["leaky-1"])
    return ToolInvocation(
        tenant_id="t1", session_id="s1", request_id=f"r-{secrets.token_hex(3)}",
        arguments={}, context=context, credential="turn", call_id="c1",
    )  # fmt: skip


def dumped(outcome: ToolOutcome) -> str:
    return json.dumps([outcome.output, outcome.error, outcome.data])


@pytest.mark.parametrize("tool", ["whoami", "whoami_structured", "refuse_key"])
async def test_a_server_repeating_the_secrets_gets_them_scrubbed_from_the_result(
    caller: McpCaller, tool: str
) -> None:  # SPEC T-19
    call = invocation(tool)
    catalog = await caller.catalog(call)
    found = McpCaller.resolve(catalog, f"leaky-1/{tool}")
    assert not isinstance(found, str), found
    outcome = await caller.call(call, found, {})
    text = dumped(outcome)
    assert API_KEY not in text and TOKEN not in text, text
    assert REDACTED in text, "the server did repeat them: the scrubbing is what removed them"
    assert outcome.success is (tool != "refuse_key")
    if tool == "whoami":
        assert "x-region: eu" in outcome.output, "a short header value is no secret"


async def test_a_reused_session_still_scrubs_after_the_turns_other_calls(
    caller: McpCaller,
) -> None:  # SPEC T-19: the secrets are kept for the turn, not only while opening
    call = invocation("whoami")
    found = McpCaller.resolve(await caller.catalog(call), "leaky-1/whoami")
    assert not isinstance(found, str)
    for _ in range(3):
        assert API_KEY not in dumped(await caller.call(call, found, {}))
    assert caller.pool.open_sessions() == 1


async def test_agent_config_scrubs_them_from_the_stored_tool_list(
    leaky: kit.RunningServer,
) -> None:  # SPEC T-19: descriptions reach the API, the catalog and the model
    remote = McpRemote(POLICY, timeout_s=10, max_tools=20)
    listing = await remote.list_tools(connection(leaky))
    assert listing.status == "ok" and listing.tools, listing
    stored: list[dict[str, Any]] = [t.__dict__ for t in listing.tools]
    text = json.dumps(stored, default=str)
    assert API_KEY not in text and REDACTED in text
