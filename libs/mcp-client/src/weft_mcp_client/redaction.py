"""Keeping a registration's secrets out of what a server sends back (SPEC T-19).

A server knows the header values and the bearer token Weft sends it, and may repeat them:
a ``whoami`` tool, an error such as "invalid key sk-...", a tool description built from
the request. Whatever it answers becomes a tool result (Kafka, the turn's events, the
model's context, memory's tables) or a stored tool list, so every text that came from a
server is scrubbed of the connection's secrets before it leaves the MCP client code.

Only values of :data:`MIN_SECRET_CHARS` characters or more are scrubbed: a short header
value (``X-Region: eu``) is a setting, and scrubbing every "eu" would garble results
without protecting anything.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from weft_contracts.mcp import McpConnection

MIN_SECRET_CHARS = 8
"""Shortest header value (or word of one) that is treated as a secret."""

REDACTED = "[redacted]"
"""What a secret is replaced with."""


def connection_secrets(conn: McpConnection) -> frozenset[str]:
    """The secrets of ``conn``: its header values and access token, and each word of
    them (``Bearer sk-...`` is also scrubbed as ``sk-...``), longest first when used."""
    values = [*conn.headers.values(), *([conn.access_token] if conn.access_token else [])]
    found: set[str] = set()
    for value in values:
        for part in (value, *value.split()):
            if len(part) >= MIN_SECRET_CHARS:
                found.add(part)
    return frozenset(found)


def redact_text(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every secret replaced by :data:`REDACTED`."""
    # Longest first: a value must go before a word of it leaves the rest behind.
    for secret in sorted(secrets, key=len, reverse=True):
        if secret in text:
            text = text.replace(secret, REDACTED)
    return text


def redact_value(value: Any, secrets: Iterable[str]) -> Any:
    """A JSON-like ``value`` with every string (keys too) scrubbed of ``secrets``."""
    wanted = frozenset(secrets)
    if not wanted:
        return value
    return _walk(value, wanted)


def _walk(value: Any, secrets: frozenset[str]) -> Any:
    if isinstance(value, str):
        return redact_text(value, secrets)
    if isinstance(value, dict):
        return {_walk(k, secrets): _walk(v, secrets) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_walk(item, secrets) for item in value]
    return value
