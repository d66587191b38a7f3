"""The SSRF-safe HTTP client of everything Weft says to MCP and OAuth servers (SPEC T-19).

The ``mcp`` SDK builds its own ``httpx.AsyncClient`` through an ``httpx_client_factory``;
:func:`pinned_client_factory` hands it one whose transport applies ``web_fetch``'s rules to
every request the client sends (the first, a redirect the SDK follows, an OAuth discovery
hop): the host is resolved, every address is checked with the :class:`AddressPolicy`, and
the connection goes to the checked address itself (``Host`` and TLS SNI keep the name).
A second, rebinding DNS answer is therefore never used: each request is pinned to the
answer that was checked for it.
"""

from __future__ import annotations

from ipaddress import ip_network
from urllib.parse import urlsplit

import httpx
from mcp.shared._httpx_utils import MCP_DEFAULT_SSE_READ_TIMEOUT, MCP_DEFAULT_TIMEOUT
from mcp.shared._httpx_utils import McpHttpClientFactory as McpHttpClientFactory
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from weft_mcp_client.safe_http import (
    AddressPolicy,
    BlockedAddress,
    Resolver,
    system_resolver,
    tls_context,
)

__all__ = [
    "McpHttpClientFactory",
    "McpReachSettings",
    "PinnedTransport",
    "allowlist_policy",
    "check_server_url",
    "pinned_client_factory",
]

_DEFAULT_PORTS = {"http": 80, "https": 443}


async def _checked_addresses(
    host: str, port: int, policy: AddressPolicy, resolver: Resolver
) -> list[str]:
    try:
        addresses = await resolver(host, port)
    except OSError as exc:
        raise BlockedAddress(f"{host} does not resolve: {exc}") from None
    if not addresses:
        raise BlockedAddress(f"{host} does not resolve")
    policy.check_host(host, addresses)
    return addresses


class PinnedTransport(httpx.AsyncBaseTransport):
    """Sends each request to an address checked for it, never to a fresh DNS answer."""

    def __init__(self, policy: AddressPolicy, resolver: Resolver = system_resolver):
        self._policy = policy
        self._resolve = resolver
        # trust_env=False: a proxy from the environment would make the checked address
        # meaningless (the proxy, not Weft, would resolve the name).
        self._inner = httpx.AsyncHTTPTransport(verify=tls_context(), trust_env=False)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Resolve, check, pin, send."""
        url = request.url
        if url.scheme not in _DEFAULT_PORTS or not url.host:
            raise BlockedAddress(f"only http(s) URLs can be reached, not {url.scheme!r}")
        host = url.host
        port = url.port or _DEFAULT_PORTS[url.scheme]
        addresses = await _checked_addresses(host, port, self._policy, self._resolve)
        request.url = url.copy_with(host=addresses[0])
        # httpx set Host from the original URL when it built the request; it stays.
        request.headers.setdefault("Host", url.netloc.decode("ascii"))
        request.extensions = {**request.extensions, "sni_hostname": host}
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        """Close the pooled connections."""
        await self._inner.aclose()


def pinned_client_factory(
    policy: AddressPolicy, resolver: Resolver = system_resolver
) -> McpHttpClientFactory:
    """An ``httpx_client_factory`` for the SDK's transports (and for Weft's own OAuth
    requests) whose clients reach only what ``policy`` allows, pinned per request."""

    def factory(
        headers: dict[str, str] | None = None,
        timeout: httpx.Timeout | None = None,
        auth: httpx.Auth | None = None,
    ) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            headers=headers,
            timeout=timeout
            or httpx.Timeout(MCP_DEFAULT_TIMEOUT, read=MCP_DEFAULT_SSE_READ_TIMEOUT),
            auth=auth,
            transport=PinnedTransport(policy, resolver),
            follow_redirects=False,
            trust_env=False,
        )

    return factory


async def check_server_url(
    url: str, policy: AddressPolicy, resolver: Resolver = system_resolver
) -> None:
    """Raise :class:`BlockedAddress` (or ValueError) with a reason a person can read
    unless ``url`` is one Weft may register as an MCP server: http(s), no userinfo, no
    fragment, a host that resolves, every address allowed by ``policy``."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise ValueError(f"the URL is not valid: {exc}") from None
    if parts.scheme not in _DEFAULT_PORTS:
        raise ValueError("the URL must start with http:// or https://")
    if not parts.hostname:
        raise ValueError("the URL has no host")
    if parts.username is not None or parts.password is not None:
        raise ValueError("the URL must not carry a user name or password: use headers")
    if parts.fragment or url.endswith("#"):
        raise ValueError("the URL must not have a fragment (#...)")
    await _checked_addresses(parts.hostname, port or _DEFAULT_PORTS[parts.scheme], policy, resolver)


class McpReachSettings(BaseSettings):
    """The operator's allowlist, read the same way by both services that reach MCP servers
    (agent-config and tool-exec mix it into their settings)."""

    model_config = SettingsConfigDict(env_prefix="WEFT_", extra="ignore")

    mcp_allowed_networks: str = Field(
        default="",
        description="Comma separated networks (CIDR) whose addresses a server URL may "
        "resolve to although private or loopback (the operator's own MCP servers; empty: "
        "public addresses only).",
    )
    mcp_allowed_hosts: str = Field(
        default="",
        description="Comma separated host names that pass whatever they resolve to.",
    )

    def mcp_policy(self) -> AddressPolicy:
        """The address policy of MCP and OAuth requests (ValueError naming a bad entry)."""
        return allowlist_policy(self.mcp_allowed_networks, self.mcp_allowed_hosts)


def allowlist_policy(networks: str, hosts: str) -> AddressPolicy:
    """The policy of MCP and OAuth requests from the operator's allowlist settings
    (``WEFT_MCP_ALLOWED_NETWORKS``, ``WEFT_MCP_ALLOWED_HOSTS``: comma separated CIDRs and
    host names); raises ValueError naming a network that does not parse."""
    parsed = []
    for item in (part.strip() for part in networks.split(",")):
        if item:
            try:
                parsed.append(ip_network(item, strict=False))
            except ValueError:
                raise ValueError(f"not a network in the MCP allowlist: {item!r}") from None
    names = frozenset(h.strip().lower().rstrip(".") for h in hosts.split(",") if h.strip())
    return AddressPolicy(allowed_networks=tuple(parsed), allowed_hosts=names)
