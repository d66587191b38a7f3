"""The MCP client library against real MCP servers the kit starts (SPEC T-19, H-06):
both transports, listing, calls, the 401 that starts an authorisation, and the whole
OAuth flow (discovery, registration, PKCE, code exchange, refresh) with a local
authorisation server. No Weft service runs here: these are the library's own contracts.
"""

from __future__ import annotations

from collections.abc import Iterator
from ipaddress import ip_network
from urllib.parse import parse_qs, urlsplit

import pytest
from weft_contracts.mcp import McpConnection
from weft_mcp_client.oauth import (
    authorization_url,
    discover_client,
    exchange_code,
    pkce_pair,
    refresh,
)
from weft_mcp_client.safe_http import AddressPolicy
from weft_mcp_client.session import McpAuthorizationNeeded, list_server_tools, mcp_session
from weft_mcp_client.transport import McpHttpClientFactory, pinned_client_factory
from weft_testkit import mcp_servers as kit

LOOPBACK = AddressPolicy(allowed_networks=(ip_network("127.0.0.0/8"),))


@pytest.fixture(scope="module")
def factory() -> McpHttpClientFactory:
    return pinned_client_factory(LOOPBACK)


@pytest.fixture(scope="module", params=["streamable_http", "sse"])
def server(request: pytest.FixtureRequest) -> Iterator[kit.RunningServer]:
    running = kit.start(kit.tools_server(), request.param)
    yield running
    running.stop()


@pytest.fixture(scope="module")
def authority() -> Iterator[kit.AuthorizationServer]:
    auth = kit.AuthorizationServer()
    auth.start()
    yield auth
    auth.stop()


@pytest.fixture(scope="module")
def protected(authority: kit.AuthorizationServer) -> Iterator[kit.RunningServer]:
    running = kit.protected_server(authority)
    yield running
    running.stop()


def connection(running: kit.RunningServer, token: str | None = None) -> McpConnection:
    return McpConnection(
        server_id="srv1",
        server_name="kit",
        url=running.url,
        transport=running.transport,
        access_token=token,
    )


async def test_lists_the_tools_with_their_schemas(
    server: kit.RunningServer, factory: McpHttpClientFactory
) -> None:
    listed = await list_server_tools(
        connection(server), factory=factory, timeout_s=10, max_tools=100
    )
    by_name = {tool.name: tool for tool in listed.tools}
    assert {"echo", "add", "slow", "failing", "image"} <= set(by_name)
    assert by_name["add"].input_schema["properties"].keys() == {"a", "b"}
    assert all(tool.problem is None for tool in listed.tools)
    assert listed.dropped == 0


async def test_calls_run_through_one_session(
    server: kit.RunningServer, factory: McpHttpClientFactory
) -> None:
    async with mcp_session(connection(server), factory=factory, timeout_s=10) as session:
        added = await session.call_tool("add", {"a": 2, "b": 3})
        failed = await session.call_tool("failing", {})
    assert added.structuredContent == {"sum": 5} and not added.isError
    assert failed.isError


async def test_tools_beyond_the_cap_are_counted_not_kept(factory: McpHttpClientFactory) -> None:
    running = kit.start(kit.many_tools_server(7), "streamable_http")
    try:
        listed = await list_server_tools(
            connection(running), factory=factory, timeout_s=10, max_tools=5
        )
    finally:
        running.stop()
    assert len(listed.tools) == 5 and listed.dropped == 2


async def test_a_401_says_authorization_is_needed_with_the_servers_challenge(
    protected: kit.RunningServer, factory: McpHttpClientFactory
) -> None:
    with pytest.raises(McpAuthorizationNeeded) as caught:
        await list_server_tools(connection(protected), factory=factory, timeout_s=10, max_tools=5)
    assert caught.value.www_authenticate is not None
    assert "resource_metadata=" in caught.value.www_authenticate


async def test_the_whole_oauth_flow_ends_in_a_working_token(
    protected: kit.RunningServer,
    authority: kit.AuthorizationServer,
    factory: McpHttpClientFactory,
) -> None:
    with pytest.raises(McpAuthorizationNeeded) as caught:
        await list_server_tools(connection(protected), factory=factory, timeout_s=10, max_tools=5)
    redirect_uri = "https://weft.test/api/v1/mcp/oauth/callback"
    client = await discover_client(
        protected.url, caught.value.www_authenticate, redirect_uri, factory=factory
    )
    assert client.issuer.rstrip("/") == authority.base_url
    assert client.client_id in authority.clients
    verifier, challenge = pkce_pair()
    url = authorization_url(client, state="st-1", challenge=challenge, resource=protected.url)
    async with factory() as http:  # the user's browser: the kit approves at once
        answer = await http.get(url)
    assert answer.status_code == 302
    back = parse_qs(urlsplit(answer.headers["location"]).query)
    assert back["state"] == ["st-1"]

    with pytest.raises(Exception, match="HTTP 400"):  # PKCE: a wrong verifier is refused
        await exchange_code(
            client, code=back["code"][0], verifier=pkce_pair()[0], resource=protected.url,
            factory=factory,
        )  # fmt: skip
    async with factory() as http:  # the refused attempt consumed the code: start again
        back = parse_qs(urlsplit((await http.get(url)).headers["location"]).query)
    tokens = await exchange_code(
        client, code=back["code"][0], verifier=verifier, resource=protected.url, factory=factory
    )
    listed = await list_server_tools(
        connection(protected, tokens.access_token), factory=factory, timeout_s=10, max_tools=50
    )
    assert "echo" in {tool.name for tool in listed.tools}

    fresh = await refresh(client, tokens, resource=protected.url, factory=factory)
    assert fresh.access_token != tokens.access_token and fresh.refresh_token
    again = await discover_client(
        protected.url, caught.value.www_authenticate, redirect_uri, factory=factory, known=client
    )
    assert again.client_id == client.client_id  # a known registration is reused
    assert len(authority.clients) == 1
