"""tool-exec's MCP tools against real MCP servers (SPEC T-19, H-06): discovery, calls by
dynamic name and by reference, result mapping, the turn's session reuse and cleanup,
deadlines, a server lost mid-call, and the 401 that starts an authorisation.

agent-config's internal routes are served by a small fake app that follows the contract
of MCP-DESIGN (the real one is tested on its side); the MCP servers are the kit's.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from ipaddress import ip_network
from typing import Any

import httpx
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from weft_contracts import ToolContext
from weft_contracts.mcp import (
    AUTHORIZATION_KEY,
    MAX_MESSAGE_BYTES,
    PUBLISHED_KEY,
    McpAuthorizationRequired,
    McpCatalog,
    McpConnection,
    McpServerCatalog,
    McpToolDef,
)
from weft_mcp_client.safe_http import AddressPolicy
from weft_mcp_client.session import list_server_tools, tool_def
from weft_mcp_client.transport import pinned_client_factory
from weft_testkit import mcp_servers as kit
from weft_tool_catalog.registry import ToolInvocation, ToolOutcome, ToolRegistry
from weft_tools.mcp_calls import McpCaller
from weft_tools.mcp_directory import HttpMcpDirectory
from weft_tools.mcp_pool import McpSessionPool
from weft_tools.mcp_tools import mcp_tools

FACTORY = pinned_client_factory(AddressPolicy(allowed_networks=(ip_network("127.0.0.0/8"),)))
SECRET = "header-secret-7f3a"
CREDENTIAL = "turn-credential-abc"


class FakeDirectory:
    """agent-config's /internal/mcp routes over a dict of servers."""

    def __init__(self) -> None:
        self.servers: dict[str, tuple[McpServerCatalog, McpConnection]] = {}
        self.authorizations: list[dict[str, Any]] = []
        self.credentials: list[str | None] = []
        self.app = FastAPI()
        self.app.get("/internal/mcp/catalog")(self.catalog)
        self.app.get("/internal/mcp/servers/{server_id}/connection")(self.connection)
        self.app.post("/internal/mcp/servers/{server_id}/authorization")(self.authorization)

    async def catalog(self, request: Request) -> JSONResponse:
        self.credentials.append(request.headers.get("authorization"))
        # Over-answering on purpose: it lists every server whatever the query asked, and
        # tool-exec must still keep to the turn's own servers.
        found = [entry[0] for entry in self.servers.values()]
        return JSONResponse(McpCatalog(servers=found).model_dump(mode="json"))

    async def connection(self, server_id: str) -> JSONResponse:
        if server_id not in self.servers:
            return JSONResponse({"detail": "not found"}, 404)
        return JSONResponse(self.servers[server_id][1].model_dump(mode="json"))

    async def authorization(self, server_id: str, request: Request) -> JSONResponse:
        self.authorizations.append(await request.json())
        required = McpAuthorizationRequired(
            server_id=server_id,
            server_name=self.servers[server_id][0].name,
            authorization_url="http://127.0.0.1:1/authorize?state=s",
            expires_at=datetime.now(UTC) + timedelta(minutes=10),
        )
        return JSONResponse(required.model_dump(mode="json"))

    async def add(self, server_id: str, name: str, running: kit.RunningServer) -> None:
        conn = McpConnection(
            server_id=server_id, server_name=name, url=running.url,
            transport=running.transport, headers={"X-Api-Key": SECRET},
        )  # fmt: skip
        try:
            listed = await list_server_tools(conn, factory=FACTORY, timeout_s=10, max_tools=50)
            tools = [
                tool_def(server_id, name, t, read_only=t.name == "echo", always_ask=True)
                for t in listed.tools
            ]
        except Exception:  # a protected server lists nothing without a token
            tools = [_echo_def(server_id, name)]
        self.servers[server_id] = (McpServerCatalog(id=server_id, name=name, tools=tools), conn)


def _echo_def(server_id: str, name: str) -> McpToolDef:
    from weft_contracts.mcp import dynamic_tool_name

    return McpToolDef(
        name=dynamic_tool_name(server_id, name, "echo"), server_id=server_id,
        server_name=name, tool_name="echo",
        parameters={"type": "object", "properties": {"text": {"type": "string"}}},
    )  # fmt: skip


@pytest.fixture(scope="module")
def servers() -> Iterator[dict[str, kit.RunningServer]]:
    authority = kit.AuthorizationServer()
    authority.start()
    process, process_sse = kit.start_process_servers("streamable_http", "sse")
    running = {
        "http": kit.start(kit.tools_server(), "streamable_http"),
        "sse": kit.start(kit.tools_server("legacy"), "sse"),
        "protected": kit.protected_server(authority),
        "process": process,
        "process-sse": process_sse,
    }
    yield running
    for server in running.values():
        server.stop()
    authority.stop()


@pytest.fixture(scope="module")
async def directory(servers: dict[str, kit.RunningServer]) -> FakeDirectory:
    fake = FakeDirectory()
    await fake.add("srv-http", "kit", servers["http"])
    await fake.add("srv-sse", "legacy", servers["sse"])
    await fake.add("srv-auth", "protected", servers["protected"])
    await fake.add("srv-proc", "process", servers["process"])
    await fake.add("srv-proc-sse", "process-sse", servers["process-sse"])
    return fake


def make_caller(directory: FakeDirectory, request_timeout_s: float) -> McpCaller:
    transport = httpx.ASGITransport(app=directory.app)
    return McpCaller(
        HttpMcpDirectory("http://agent-config", transport=transport),
        McpSessionPool(FACTORY, idle_s=30),
        request_timeout_s=request_timeout_s,
    )


@pytest.fixture
async def caller(directory: FakeDirectory) -> AsyncIterator[McpCaller]:
    # A deadline the test servers' work fits in on a loaded CI machine (writing megabytes
    # took over 2 s there): what a test checks must not race it. The deadline test has its
    # own short one (hasty_caller).
    caller = make_caller(directory, request_timeout_s=30)
    yield caller
    await caller.pool.close()


@pytest.fixture
async def hasty_caller(directory: FakeDirectory) -> AsyncIterator[McpCaller]:
    caller = make_caller(directory, request_timeout_s=2)
    yield caller
    await caller.pool.close()


def make_registry(caller: McpCaller) -> ToolRegistry:
    registry = ToolRegistry()
    discover, call, dynamic = mcp_tools(caller)
    registry.register(discover)
    registry.register(call)
    registry.add_dynamic(dynamic)
    return registry


@pytest.fixture
def registry(caller: McpCaller) -> ToolRegistry:
    return make_registry(caller)


def invocation(args: dict[str, Any], servers: list[str] | None, request: str = "r1",
               max_chars: int = 24000) -> ToolInvocation:  # fmt: skip
    context = ToolContext(
        user_id="u1", agent_id="a1", mcp_server_ids=servers, max_output_chars=max_chars,
        mcp_auth_wait_s=1800,
    )  # fmt: skip
    return ToolInvocation(
        tenant_id="t1", session_id="s1", request_id=request, arguments=args,
        context=context, credential=CREDENTIAL, call_id="call-1",
    )  # fmt: skip


def dyn(directory: FakeDirectory, server_id: str, tool: str) -> str:
    catalog = directory.servers[server_id][0]
    return next(t.name for t in catalog.tools if t.tool_name == tool)


def assert_no_secret(outcome: ToolOutcome) -> None:
    dumped = json.dumps([outcome.output, outcome.error, outcome.data], default=str)
    assert SECRET not in dumped and CREDENTIAL not in dumped


async def test_discovery_lists_searches_and_publishes_on_describe(
    registry: ToolRegistry, directory: FakeDirectory
) -> None:
    turn = ["srv-http", "srv-sse"]
    listed = await registry.execute(
        "discover_mcp_tools", invocation({"mode": "list_servers"}, turn)
    )
    assert {s["id"] for s in json.loads(listed.output)["servers"]} == set(turn)
    page = await registry.execute(
        "discover_mcp_tools",
        invocation({"mode": "list_tools", "server_id": "srv-http", "limit": 3}, turn),
    )
    body = json.loads(page.output)
    assert len(body["tools"]) == 3 and "next_cursor" in body
    found = await registry.execute(
        "discover_mcp_tools", invocation({"mode": "search", "query": "ADD integers"}, turn)
    )
    assert json.loads(found.output)["tools"][0]["name"] == "add"
    described = await registry.execute(
        "discover_mcp_tools",
        invocation({"mode": "describe", "server_id": "srv-http", "tool_name": "add"}, turn),
    )
    assert described.success
    published = [McpToolDef.model_validate(t) for t in described.data[PUBLISHED_KEY]]
    assert [t.tool_name for t in published] == ["add"] and published[0].risk == "write"
    assert directory.credentials[-1] == f"Bearer {CREDENTIAL}"


@pytest.mark.parametrize("server_id", ["srv-http", "srv-sse"])
async def test_calls_map_text_structured_images_resources_and_errors(
    registry: ToolRegistry, directory: FakeDirectory, server_id: str
) -> None:
    turn = [server_id]
    added = await registry.execute(
        dyn(directory, server_id, "add"), invocation({"a": 2, "b": 5}, turn)
    )
    assert added.success and added.data["structured"] == {"sum": 7}
    image = await registry.execute(dyn(directory, server_id, "image"), invocation({}, turn))
    assert image.output.startswith("[image image/png,") and len(image.data["images"]) == 1
    resource = await registry.execute(
        "call_mcp_tool", invocation({"tool_ref": f"{server_id}/resource", "arguments": {}}, turn)
    )
    assert "resource text" in resource.output
    failed = await registry.execute(dyn(directory, server_id, "failing"), invocation({}, turn))
    assert not failed.success and failed.error and "failed as asked" in failed.error
    for outcome in (added, image, resource, failed):
        assert_no_secret(outcome)


async def test_bad_arguments_and_foreign_tools_are_refused(
    registry: ToolRegistry, directory: FakeDirectory
) -> None:
    bad = await registry.execute(
        dyn(directory, "srv-http", "add"), invocation({"a": "two"}, ["srv-http"])
    )
    assert not bad.success and bad.error and "invalid arguments" in bad.error
    other = await registry.execute(  # the directory knows srv-sse; this turn does not
        dyn(directory, "srv-sse", "echo"), invocation({"text": "x"}, ["srv-http"])
    )
    assert not other.success and other.error and "no MCP tool" in other.error
    none = await registry.execute("call_mcp_tool", invocation(
        {"tool_ref": "srv-http/echo", "arguments": {"text": "x"}}, None))  # fmt: skip
    assert not none.success and none.error and "no MCP servers" in none.error


async def test_a_turns_calls_share_one_session_closed_at_turn_end(
    registry: ToolRegistry, caller: McpCaller, directory: FakeDirectory
) -> None:
    echo = dyn(directory, "srv-http", "echo")
    for text in ("one", "two", "three"):
        outcome = await registry.execute(echo, invocation({"text": text}, ["srv-http"], "r-pool"))
        assert outcome.output == text
    assert caller.pool.open_sessions() == 1
    await registry.execute(echo, invocation({"text": "x"}, ["srv-http"], "r-other"))
    assert caller.pool.open_sessions() == 2
    await registry.cleanup("s1", "r-pool")
    assert caller.pool.open_sessions() == 1
    await caller.pool.close()
    assert caller.pool.open_sessions() == 0


async def test_oversized_results_are_truncated(
    registry: ToolRegistry, directory: FakeDirectory
) -> None:
    outcome = await registry.execute(
        dyn(directory, "srv-http", "big_text"),
        invocation({"chars": 3_000_000}, ["srv-http"], max_chars=2000),
    )
    assert outcome.success and len(outcome.output) < 2100 and "characters omitted" in outcome.output


@pytest.mark.parametrize("server_id", ["srv-http", "srv-sse"])
async def test_a_message_past_the_cap_is_cut_off_and_the_server_still_serves(
    registry: ToolRegistry, directory: FakeDirectory, server_id: str
) -> None:
    """A server answering more than MAX_MESSAGE_BYTES (here ~10 MB of text) is cut off
    while it is read: the model reads why, tool-exec never held the whole answer, and
    the next call to the same server works (a new session)."""
    huge = await registry.execute(
        dyn(directory, server_id, "big_text"),
        invocation({"chars": 10_000_000}, [server_id], f"r-huge-{server_id}"),
    )
    assert not huge.success and huge.error, huge
    assert f"larger than {MAX_MESSAGE_BYTES} bytes" in huge.error, huge.error
    after = await registry.execute(
        dyn(directory, server_id, "echo"),
        invocation({"text": "still here"}, [server_id], f"r-huge-{server_id}"),
    )
    assert after.success and after.output == "still here", after


async def test_a_slow_tool_past_its_deadline_times_out(
    hasty_caller: McpCaller, directory: FakeDirectory
) -> None:
    registry = make_registry(hasty_caller)
    outcome = await registry.execute(
        dyn(directory, "srv-http", "slow"), invocation({"seconds": 30}, ["srv-http"], "r-slow")
    )
    assert not outcome.success and outcome.error and "timed out" in outcome.error


@pytest.mark.parametrize("server", ["srv-proc", "srv-proc-sse"])
async def test_a_server_lost_mid_call_is_reported_not_replayed(
    registry: ToolRegistry, caller: McpCaller, directory: FakeDirectory, server: str
) -> None:
    outcome = await registry.execute(
        dyn(directory, server, "vanish_now"), invocation({}, [server], "r-vanish")
    )
    assert not outcome.success and outcome.error
    assert "outcome is unknown" in outcome.error or "unavailable" in outcome.error
    assert caller.pool.open_sessions() == 0


async def test_a_401_starts_an_authorisation_for_this_call(
    registry: ToolRegistry, directory: FakeDirectory
) -> None:
    outcome = await registry.execute(
        dyn(directory, "srv-auth", "echo"), invocation({"text": "hi"}, ["srv-auth"], "r-auth")
    )
    assert not outcome.success and outcome.error and "needs your authorisation" in outcome.error
    required = McpAuthorizationRequired.model_validate(outcome.data[AUTHORIZATION_KEY])
    assert required.server_id == "srv-auth"
    start = directory.authorizations[-1]
    assert start["call_id"] == "call-1" and "resource_metadata" in start["www_authenticate"]
    assert start["wait_s"] == 1800, "the link lives as long as the turn waits (H-06)"
    assert_no_secret(outcome)


async def test_a_server_listed_only_after_authorisation_asks_for_it(
    registry: ToolRegistry, directory: FakeDirectory
) -> None:  # SPEC H-06: agent-config could not list its tools without the user's token
    server, conn = directory.servers["srv-auth"]
    directory.servers["srv-unlisted"] = (
        server.model_copy(update={"id": "srv-unlisted", "tools": [],
                                  "status": "authorization_required"}), conn,
    )  # fmt: skip
    for args in ({"mode": "describe", "server_id": "srv-unlisted", "tool_name": "echo"},
                 {"mode": "list_tools", "server_id": "srv-unlisted"}):  # fmt: skip
        outcome = await registry.execute("discover_mcp_tools", invocation(args, ["srv-unlisted"]))
        assert not outcome.success and AUTHORIZATION_KEY in outcome.data, outcome
    by_ref = invocation({"tool_ref": "srv-unlisted/echo", "arguments": {}}, ["srv-unlisted"])
    outcome = await registry.execute("call_mcp_tool", by_ref)
    assert AUTHORIZATION_KEY in outcome.data, outcome
    other = invocation({"tool_ref": "srv-http/nope", "arguments": {}}, ["srv-http"])
    refused = await registry.execute("call_mcp_tool", other)
    assert AUTHORIZATION_KEY not in refused.data and "no MCP tool" in (refused.error or "")
    del directory.servers["srv-unlisted"]


async def test_a_server_listed_with_another_users_token_does_not_ask_again(
    registry: ToolRegistry, directory: FakeDirectory
) -> None:  # SPEC H-06: the status is the server's, the token is the user's
    server, conn = directory.servers["srv-http"]
    directory.servers["srv-shared"] = (
        server.model_copy(update={"id": "srv-shared", "status": "authorization_required"}), conn,
    )  # fmt: skip
    args = {"mode": "describe", "server_id": "srv-shared", "tool_name": "echo"}
    outcome = await registry.execute("discover_mcp_tools", invocation(args, ["srv-shared"]))
    assert outcome.success and AUTHORIZATION_KEY not in outcome.data, outcome
    assert PUBLISHED_KEY in outcome.data
    del directory.servers["srv-shared"]


async def test_a_turns_catalog_is_read_once_until_it_ends(
    registry: ToolRegistry, directory: FakeDirectory, caller: McpCaller
) -> None:  # SPEC T-19: a turn's later calls skip the round trip to agent-config
    echo = dyn(directory, "srv-http", "echo")
    before = len(directory.credentials)
    for _ in range(3):
        done = await registry.execute(echo, invocation({"text": "x"}, ["srv-http"], "r-cache"))
        assert done.success, done
    assert len(directory.credentials) - before == 1
    listed = {"mode": "list_servers", "refresh": True}
    await registry.execute("discover_mcp_tools", invocation(listed, ["srv-http"], "r-cache"))
    assert len(directory.credentials) - before == 2, "refresh reads it again"
    await registry.execute(echo, invocation({"text": "x"}, ["srv-http"], "r-other"))
    assert len(directory.credentials) - before == 3, "another turn has its own"
    await registry.cleanup("s1", "r-cache")
    await registry.execute(echo, invocation({"text": "x"}, ["srv-http"], "r-cache"))
    assert len(directory.credentials) - before == 4, "a turn's end forgets it"


async def test_after_an_authorisation_the_turn_reads_the_catalog_again(
    registry: ToolRegistry, directory: FakeDirectory
) -> None:  # SPEC H-06: the retried call sees the tools the user's token lists
    server, conn = directory.servers["srv-http"]
    unlisted = server.model_copy(
        update={"id": "srv-late", "tools": [], "status": "authorization_required"}
    )
    directory.servers["srv-late"] = (unlisted, conn)
    ask = {"mode": "describe", "server_id": "srv-late", "tool_name": "echo"}
    first = await registry.execute("discover_mcp_tools", invocation(ask, ["srv-late"], "r-late"))
    assert AUTHORIZATION_KEY in first.data
    directory.servers["srv-late"] = (server.model_copy(update={"id": "srv-late"}), conn)
    again = await registry.execute("discover_mcp_tools", invocation(ask, ["srv-late"], "r-late"))
    assert again.success and PUBLISHED_KEY in again.data, again
    del directory.servers["srv-late"]
