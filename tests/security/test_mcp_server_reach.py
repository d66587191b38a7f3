"""A tenant's MCP server URL cannot make Weft reach what web_fetch may not (SPEC T-19,
T-13), and what a hostile server lists is refused or bounded.

Threats: a tenant registers (or a server redirects to) loopback, a private range or cloud
metadata; a name that resolves to a public address when checked and to loopback when
connected (DNS rebinding); a server listing huge, recursive or invalid schemas, names that
imitate Weft's built-ins or instructions in descriptions; a server that never answers.
Every request goes through the pinned client factory the SDK is given, so each of them is
resolved, checked and connected to the checked address. Servers are real (the kit's).
"""

from __future__ import annotations

from collections.abc import Iterator
from ipaddress import ip_network

import pytest
from weft_contracts.mcp import (
    MAX_TOOL_DESCRIPTION_CHARS,
    TOOL_NAME_PATTERN,
    McpConnection,
    dynamic_tool_name,
)
from weft_mcp_client.safe_http import AddressPolicy, BlockedAddress
from weft_mcp_client.session import McpUnavailable, list_server_tools, tool_def
from weft_mcp_client.transport import check_server_url, pinned_client_factory
from weft_testkit import mcp_servers as kit
from weft_tool_catalog.specs import OFFERABLE_SPECS

LOOPBACK = AddressPolicy(allowed_networks=(ip_network("127.0.0.0/8"),))
PUBLIC = "93.184.216.34"


@pytest.fixture(scope="module")
def tools() -> Iterator[kit.RunningServer]:
    running = kit.start(kit.tools_server(), "streamable_http")
    yield running
    running.stop()


@pytest.fixture(scope="module")
def hostile() -> Iterator[kit.RunningServer]:
    running = kit.start(kit.hostile_server(), "streamable_http")
    yield running
    running.stop()


def conn(url: str, transport: kit.Transport = "streamable_http") -> McpConnection:
    return McpConnection(server_id="srv1", server_name="evil", url=url, transport=transport)


def named(port: int, name: str = "mcp.attacker.test") -> str:
    return f"http://{name}:{port}/mcp"


def port_of(running: kit.RunningServer) -> int:
    return int(running.base_url.rsplit(":", 1)[1])


async def test_loopback_is_refused_without_the_operators_allowlist(
    tools: kit.RunningServer,
) -> None:
    with pytest.raises(BlockedAddress, match="not a public address"):
        await check_server_url(tools.url, AddressPolicy())
    with pytest.raises(McpUnavailable, match="refused"):
        await list_server_tools(
            conn(tools.url), factory=pinned_client_factory(AddressPolicy()), timeout_s=5,
            max_tools=10,
        )  # fmt: skip
    # ... and reached once the operator names the network
    await check_server_url(tools.url, LOOPBACK)


async def test_dns_rebinding_cannot_reach_loopback(tools: kit.RunningServer) -> None:
    """The name resolves to a public address when the URL is checked, then to loopback:
    the connection is checked again on its own answer and never made."""
    answers = iter([[PUBLIC], ["127.0.0.1"], ["127.0.0.1"], ["127.0.0.1"]])
    asked: list[str] = []

    async def rebinding(host: str, port: int) -> list[str]:
        asked.append(host)
        return next(answers)

    url = named(port_of(tools))
    await check_server_url(url, AddressPolicy(), rebinding)  # the first answer is public
    with pytest.raises(McpUnavailable, match=r"127\.0\.0\.1 is not a public address"):
        await list_server_tools(
            conn(url), factory=pinned_client_factory(AddressPolicy(), rebinding), timeout_s=5,
            max_tools=10,
        )  # fmt: skip
    assert len(asked) >= 2  # the connection resolved again: no cached public answer used


async def test_the_connection_goes_to_the_checked_address(tools: kit.RunningServer) -> None:
    """DNS pinning: the request is sent to the address that was checked (here loopback,
    allowlisted), with the name kept in Host; no second lookup by the HTTP stack."""
    seen: list[str] = []

    async def resolver(host: str, port: int) -> list[str]:
        seen.append(host)
        return ["127.0.0.1"]

    factory = pinned_client_factory(LOOPBACK, resolver)
    listed = await list_server_tools(
        conn(named(port_of(tools))), factory=factory, timeout_s=10, max_tools=50
    )
    assert "echo" in {tool.name for tool in listed.tools}
    assert set(seen) == {"mcp.attacker.test"}


@pytest.mark.parametrize("target", ["loopback", "private", "metadata"])
async def test_redirects_are_checked_hop_by_hop(tools: kit.RunningServer, target: str) -> None:
    """A public-looking server redirects to loopback / a private address / metadata: the
    SDK does not follow a cross-origin redirect, and the pinned client refuses the hop
    even when a caller follows redirects itself."""
    location = {
        "loopback": tools.url,
        "private": "http://10.0.0.7/mcp",
        "metadata": "http://169.254.169.254/latest/meta-data/",
    }[target]
    redirector = kit.redirect_server(location)
    trusted = "redirector.test"

    async def resolver(host: str, port: int) -> list[str]:
        return {"redirector.test": ["127.0.0.1"]}.get(host, [host])

    # The operator trusts the redirector's name only; loopback by address is not allowed.
    policy = AddressPolicy(allowed_hosts=frozenset({trusted}))
    factory = pinned_client_factory(policy, resolver)
    url = named(port_of(redirector), trusted)
    try:
        with pytest.raises(McpUnavailable):
            await list_server_tools(conn(url), factory=factory, timeout_s=5, max_tools=10)
        async with factory() as http:
            with pytest.raises(BlockedAddress, match="not a public address"):
                await http.get(url, follow_redirects=True)
        assert redirector.calls  # the redirector was reached; its target never was
    finally:
        redirector.stop()


async def test_a_server_that_never_answers_is_cut_off() -> None:
    silent = kit.never_answering_server()
    try:
        with pytest.raises(McpUnavailable, match="did not list its tools within"):
            await list_server_tools(
                conn(silent.url), factory=pinned_client_factory(LOOPBACK), timeout_s=1,
                max_tools=10,
            )  # fmt: skip
    finally:
        silent.stop()


async def test_hostile_tool_lists_are_refused_or_bounded(hostile: kit.RunningServer) -> None:
    listed = await list_server_tools(
        conn(hostile.url), factory=pinned_client_factory(LOOPBACK), timeout_s=10, max_tools=50
    )
    problems = {tool.name: tool.problem for tool in listed.tools}
    assert problems["huge_schema"] and "bytes" in problems["huge_schema"]
    assert problems["recursive_schema"] and "recursive" in problems["recursive_schema"]
    assert problems["invalid_schema"] and "not valid" in problems["invalid_schema"]
    assert problems["remote_ref"] and "outside" in problems["remote_ref"]
    assert problems["bad name with spaces"] is not None
    for tool in listed.tools:
        if tool.problem:  # a refused schema is not kept at all
            assert tool.input_schema == {"type": "object"}
        assert len(tool.description) <= MAX_TOOL_DESCRIPTION_CHARS
        assert "\x00" not in tool.description


async def test_names_imitating_built_ins_never_take_their_place(
    hostile: kit.RunningServer,
) -> None:
    listed = await list_server_tools(
        conn(hostile.url), factory=pinned_client_factory(LOOPBACK), timeout_s=10, max_tools=50
    )
    builtins = {spec.name for spec in OFFERABLE_SPECS}
    usable = [tool for tool in listed.tools if tool.problem is None]
    assert {"search_knowledge", "mcp_evil_search_00000000"} <= {tool.name for tool in usable}
    for tool in usable:
        definition = tool_def("srv1", "evil", tool, read_only=True, always_ask=False)
        assert definition.name not in builtins
        assert TOOL_NAME_PATTERN.fullmatch(definition.name)
        assert definition.name == dynamic_tool_name("srv1", "evil", tool.name)
        assert definition.definition()["function"]["description"].startswith("[MCP evil]")
    # a second server's same tool names never collide with the first's
    assert dynamic_tool_name("srv1", "evil", "search_knowledge") != dynamic_tool_name(
        "srv2", "evil", "search_knowledge"
    )
