"""The IPv4 addresses an IPv6 address carries (SPEC T-13, SSRF guard).

Transition mechanisms put an IPv4 address inside an IPv6 one, and a host that routes the
IPv6 form (a dual-stack socket, a NAT64 gateway, a 6to4 or Teredo relay) may deliver the
packet to that IPv4 address. ``ipaddress.IPv6Address.is_global`` judges only the IPv6
prefix, and how it judges these prefixes differs between Python releases, so the guard
reads the embedded IPv4 itself and judges that.
"""

from __future__ import annotations

import ipaddress
from ipaddress import IPv4Address, IPv6Address, IPv6Network

NAT64_WELL_KNOWN = IPv6Network("64:ff9b::/96")
"""RFC 6052: the IPv4 address is the last 32 bits."""

NAT64_LOCAL_USE = IPv6Network("64:ff9b:1::/48")
"""RFC 8215: operators carve their own prefix (of /48 to /96) out of it, so where the
IPv4 sits depends on a local choice; it is never a public web address."""

SIX_TO_FOUR = IPv6Network("2002::/16")
"""RFC 3056: the IPv4 address is bits 16-48 (``IPv6Address.sixtofour``)."""

TEREDO = IPv6Network("2001::/32")
"""RFC 4380: server IPv4 in bits 32-64, client IPv4 in the last 32 bits inverted
(``IPv6Address.teredo``)."""

_IPV4_COMPATIBLE_MAX = 0xFFFF_FFFF


class UnknownEmbedding(ValueError):
    """The address is in a translation prefix whose IPv4 position cannot be known."""


def embedded_ipv4(ip: IPv6Address) -> tuple[IPv4Address, ...]:
    """The IPv4 addresses ``ip`` may lead to; empty for a plain IPv6 address.

    Raises :class:`UnknownEmbedding` for the NAT64 local-use prefix.
    """
    if ip.ipv4_mapped is not None:
        return (ip.ipv4_mapped,)
    as_int = int(ip)
    # IPv4-compatible ``::a.b.c.d`` (RFC 4291, deprecated but still parsed and routed by
    # some stacks); ``::`` and ``::1`` are the unspecified and loopback IPv6 addresses.
    if 1 < as_int <= _IPV4_COMPATIBLE_MAX:
        return (IPv4Address(as_int),)
    if ip in NAT64_WELL_KNOWN:
        return (IPv4Address(as_int & _IPV4_COMPATIBLE_MAX),)
    if ip in NAT64_LOCAL_USE:
        raise UnknownEmbedding(f"{ip} is in the local-use NAT64 prefix {NAT64_LOCAL_USE}")
    if ip.sixtofour is not None:
        return (ip.sixtofour,)
    if ip.teredo is not None:
        server, client = ip.teredo
        return (server, client)
    return ()


def parse_address(text: str) -> IPv4Address | IPv6Address:
    """An address as resolvers print it, without an IPv6 zone (``fe80::1%eth0``)."""
    return ipaddress.ip_address(text.split("%", 1)[0])
