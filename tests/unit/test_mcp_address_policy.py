"""The operator's allowlist of MCP server addresses and the registration URL check (T-19)."""

from __future__ import annotations

from ipaddress import ip_network

import pytest
from weft_mcp_client.safe_http import AddressPolicy, BlockedAddress
from weft_mcp_client.transport import check_server_url


def resolver_of(answers: dict[str, list[str]]):  # type: ignore[no-untyped-def]
    async def resolve(host: str, port: int) -> list[str]:
        return answers.get(host, [])

    return resolve


def test_loopback_and_private_are_refused_by_default() -> None:
    policy = AddressPolicy()
    for address in ("127.0.0.1", "10.1.2.3", "169.254.169.254", "::1", "::ffff:127.0.0.1"):
        with pytest.raises(BlockedAddress):
            policy.check(address)


def test_allowed_networks_let_their_addresses_through_only() -> None:
    policy = AddressPolicy(allowed_networks=(ip_network("10.20.0.0/16"),))
    policy.check("10.20.3.4")
    with pytest.raises(BlockedAddress):
        policy.check("10.21.0.1")
    with pytest.raises(BlockedAddress):
        policy.check("127.0.0.1")


def test_an_allowed_host_passes_whatever_it_resolves_to() -> None:
    policy = AddressPolicy(allowed_hosts=frozenset({"mcp.corp"}))
    policy.check_host("MCP.corp.", ["10.0.0.5"])
    with pytest.raises(BlockedAddress):
        policy.check_host("other.corp", ["10.0.0.5"])


def test_one_bad_answer_blocks_the_host() -> None:
    with pytest.raises(BlockedAddress):
        AddressPolicy().check_host("mixed.test", ["93.184.216.34", "127.0.0.1"])


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("ftp://mcp.test/x", "http:// or https://"),
        ("https://user:pw@mcp.test/mcp", "user name or password"),
        ("https://mcp.test/mcp#frag", "fragment"),
        ("https:///mcp", "no host"),
        ("https://nowhere.test/mcp", "does not resolve"),
        ("https://local.test/mcp", "not a public address"),
        ("https://mcp.test:99999/mcp", "not valid"),
    ],
)
async def test_check_server_url_says_why(url: str, reason: str) -> None:
    resolve = resolver_of({"mcp.test": ["93.184.216.34"], "local.test": ["127.0.0.1"]})
    with pytest.raises(ValueError, match=reason):
        await check_server_url(url, AddressPolicy(), resolve)


async def test_check_server_url_accepts_a_public_host() -> None:
    resolve = resolver_of({"mcp.test": ["93.184.216.34"]})
    await check_server_url("https://mcp.test/mcp", AddressPolicy(), resolve)
