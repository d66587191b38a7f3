"""An SSRF-safe HTTP client for web tools (SPEC T-13).

Every hop (the first URL and each redirect) is resolved once; the request is refused when
any resolved address is not globally routable (private, loopback, link-local - which covers
cloud metadata at 169.254.169.254 -, CGNAT, multicast, reserved), nor is an IPv6 address
that carries such an IPv4 address (IPv4-mapped, IPv4-compatible, NAT64, 6to4, Teredo: see
:mod:`weft_mcp_client.embedded_ipv4`). The connection then goes to the checked address itself
(DNS pinning: the URL's host is replaced by the IP, ``Host`` and TLS SNI keep the name),
so a second, rebinding DNS answer is never used. Loopback is allowed only through an
explicit test setting, or an operator's allowlist (:class:`AddressPolicy`:
``allowed_networks``, ``allowed_hosts``), which MCP server registrations use.
"""

from __future__ import annotations

import asyncio
import functools
import socket
import ssl
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network
from urllib.parse import urljoin, urlsplit, urlunsplit

import httpx

from weft_mcp_client.embedded_ipv4 import UnknownEmbedding, embedded_ipv4, parse_address

Resolver = Callable[[str, int], Awaitable[list[str]]]


class BlockedAddress(ValueError):
    """The URL points at an address web tools must not reach."""


async def system_resolver(host: str, port: int) -> list[str]:
    """Every address ``host`` resolves to."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return sorted({str(info[4][0]) for info in infos})


@functools.cache
def tls_context() -> ssl.SSLContext:
    """The process's one TLS context for outgoing HTTPS (httpx defaults, certifi CAs).

    httpx builds a new context, loading the whole CA bundle, for every client it is not
    given one: tens of milliseconds of CPU that block the event loop, once per fetched
    page, searched query or memory lookup. Contexts are safe to share between clients.
    """
    return httpx.create_ssl_context()


@dataclass(frozen=True, kw_only=True)
class AddressPolicy:
    """Which resolved addresses may be contacted."""

    allow_loopback: bool = False
    """Tests only: lets the client reach a local test server on 127.0.0.1 / ::1."""
    allowed_networks: tuple[IPv4Network | IPv6Network, ...] = ()
    """The operator's allowlist: an address inside one of these passes even when it is
    private or loopback (an MCP server on the operator's own network)."""
    allowed_hosts: frozenset[str] = frozenset()
    """Host names (lower case) that pass whatever they resolve to: the operator trusts
    the name and its DNS, so a rebinding answer for such a name is not caught."""

    def check_host(self, host: str, addresses: Iterable[str]) -> None:
        """Raise :class:`BlockedAddress` unless ``host`` is allowlisted or every one of its
        resolved ``addresses`` may be contacted (one bad answer blocks the host: no
        round-robin luck)."""
        if host.lower().rstrip(".") in self.allowed_hosts:
            return
        for address in addresses:
            self.check(address)

    def check(self, address: str) -> None:
        """Raise :class:`BlockedAddress` unless ``address`` may be contacted."""
        ip = parse_address(address)
        if self._allowlisted(ip):
            return
        if isinstance(ip, IPv6Address):
            try:
                carried = embedded_ipv4(ip)
            except UnknownEmbedding as exc:
                raise BlockedAddress(str(exc)) from None
            if carried:
                # The IPv6 prefix only says how the packet travels; where it lands is
                # the IPv4 address, so that alone decides.
                for inner in carried:
                    self._check_one(inner, outer=ip)
                return
        self._check_one(ip, outer=None)

    def _allowlisted(self, ip: IPv4Address | IPv6Address) -> bool:
        return any(ip.version == net.version and ip in net for net in self.allowed_networks)

    def _check_one(self, ip: IPv4Address | IPv6Address, *, outer: IPv6Address | None) -> None:
        if ip.is_loopback and self.allow_loopback:
            return
        if self._allowlisted(ip):
            return
        if not ip.is_global or ip.is_multicast:
            shown = f"{outer} (carrying {ip})" if outer is not None else str(ip)
            raise BlockedAddress(f"address {shown} is not a public address")


@dataclass(frozen=True, kw_only=True)
class FetchedPage:
    """A final (non-redirect) response."""

    url: str
    status: int
    content_type: str
    body: bytes
    truncated: bool


class SafeHttpClient:
    """GETs public URLs only, following at most ``max_redirects`` checked redirects."""

    def __init__(
        self,
        *,
        policy: AddressPolicy | None = None,
        resolver: Resolver = system_resolver,
        max_redirects: int = 5,
        max_bytes: int = 5_000_000,
        user_agent: str = "WeftBot/0.1 (+https://github.com/weft)",
    ):
        self._policy = policy or AddressPolicy()
        self._resolve = resolver
        self._max_redirects = max_redirects
        self._max_bytes = max_bytes
        self._user_agent = user_agent

    async def get(self, url: str, timeout_s: float) -> FetchedPage:
        """The page at ``url``; raise BlockedAddress, httpx.HTTPError or TimeoutError."""
        async with asyncio.timeout(timeout_s):
            # httpx's default 5 s read timeout would cut slow pages well inside the page
            # budget; the budget (asyncio.timeout above) is the limit that matters.
            limits = httpx.Timeout(timeout_s, connect=min(10.0, timeout_s))
            async with httpx.AsyncClient(
                follow_redirects=False, trust_env=False, timeout=limits, verify=tls_context()
            ) as client:
                for _ in range(self._max_redirects + 1):
                    page = await self._hop(client, url)
                    location = page.headers.get("location") if page.is_redirect else None
                    if location is None:
                        return await self._read(url, page)
                    await page.aclose()
                    url = urljoin(url, location)
        raise BlockedAddress(f"more than {self._max_redirects} redirects")

    async def _hop(self, client: httpx.AsyncClient, url: str) -> httpx.Response:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise BlockedAddress(f"only http(s) URLs can be fetched, not {url!r}")
        host = parts.hostname
        port = parts.port or (443 if parts.scheme == "https" else 80)
        addresses = await self._resolve(host, port)
        if not addresses:
            raise BlockedAddress(f"{host} does not resolve")
        self._policy.check_host(host, addresses)
        pinned = addresses[0]
        netloc = f"[{pinned}]" if ":" in pinned else pinned
        target = urlunsplit((parts.scheme, f"{netloc}:{port}", parts.path or "/", parts.query, ""))
        default_port = port == (443 if parts.scheme == "https" else 80)
        headers = {
            "Host": host if default_port else f"{host}:{port}",
            "User-Agent": self._user_agent,
        }
        request = client.build_request(
            "GET", target, headers=headers, extensions={"sni_hostname": host}
        )
        return await client.send(request, stream=True)

    async def _read(self, url: str, response: httpx.Response) -> FetchedPage:
        chunks: list[bytes] = []
        size, truncated = 0, False
        try:
            async for chunk in response.aiter_bytes():
                chunks.append(chunk)
                size += len(chunk)
                if size >= self._max_bytes:
                    truncated = True
                    break
        finally:
            await response.aclose()
        return FetchedPage(
            url=url,
            status=response.status_code,
            content_type=response.headers.get("content-type", ""),
            body=b"".join(chunks)[: self._max_bytes],
            truncated=truncated,
        )
