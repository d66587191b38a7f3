"""What a tenant may register: the bodies of the public MCP server routes and their checks
(name slug, header names and values), and the views returned (header names, never values).

The URL's own check (scheme, host, addresses against the operator's allowlist) is
``weft_mcp_client.transport.check_server_url``, run by the service: it needs DNS.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator
from weft_contracts.mcp import McpServerStatus, McpTransport

NAME_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,63}$"
MAX_HEADERS = 20
MAX_HEADER_BYTES = 8192
MAX_URL_CHARS = 2048

_TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
"""RFC 7230 ``token``: what a header field name may be made of."""
_REFUSED_HEADERS = frozenset({"host", "content-length", "transfer-encoding", "connection"})
"""Headers the HTTP client sets itself: a registration overriding them could split or
redirect requests."""


def header_problem(name: str, value: str) -> str | None:
    """Why a header may not be registered; None when it may."""
    if not _TOKEN.match(name):
        return f"header name {name[:80]!r} is not an HTTP token (RFC 7230)"
    if name.lower() in _REFUSED_HEADERS:
        return f"header {name!r} is set by Weft itself and cannot be registered"
    if any(c in value for c in "\r\n\x00"):
        return f"header {name!r}: the value contains CR, LF or NUL"
    if len(name.encode()) + len(value.encode()) > MAX_HEADER_BYTES:
        return f"header {name!r} is longer than {MAX_HEADER_BYTES} bytes"
    return None


def checked_headers(headers: dict[str, str]) -> dict[str, str]:
    """``headers`` if every one may be registered; ValueError with the first reason."""
    if len(headers) > MAX_HEADERS:
        raise ValueError(f"at most {MAX_HEADERS} headers (got {len(headers)})")
    lowered = [n.lower() for n in headers]
    if len(set(lowered)) != len(lowered):
        raise ValueError("header names must differ (case-insensitively)")
    for name, value in headers.items():
        if problem := header_problem(name, value):
            raise ValueError(problem)
    return headers


class ServerCreate(BaseModel):
    """Body of ``POST /api/v1/mcp/servers``."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=NAME_PATTERN, description="Unique per tenant.")
    url: str = Field(min_length=1, max_length=MAX_URL_CHARS)
    transport: McpTransport = "streamable_http"
    description: str = Field(default="", max_length=500)
    headers: dict[str, str] = Field(
        default_factory=dict, description="Sent on every request; stored encrypted."
    )
    enabled: bool = True

    @field_validator("headers")
    @classmethod
    def _headers(cls, value: dict[str, str]) -> dict[str, str]:
        return checked_headers(value)


class ServerUpdate(BaseModel):
    """Body of ``PATCH /api/v1/mcp/servers/{id}``: what is given is changed. ``headers``
    replaces every header (``{}``: none)."""

    model_config = ConfigDict(extra="forbid")

    name: str | None = Field(default=None, pattern=NAME_PATTERN)
    url: str | None = Field(default=None, min_length=1, max_length=MAX_URL_CHARS)
    transport: McpTransport | None = None
    description: str | None = Field(default=None, max_length=500)
    headers: dict[str, str] | None = None
    enabled: bool | None = None

    @field_validator("headers")
    @classmethod
    def _headers(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        return None if value is None else checked_headers(value)


class ToolFlags(BaseModel):
    """Body of ``PATCH /api/v1/mcp/servers/{id}/tools/{tool_name}``."""

    model_config = ConfigDict(extra="forbid")

    read_only: bool | None = Field(
        default=None, description="The tool only reads: risk ``read`` instead of ``write``."
    )
    always_ask: bool | None = Field(
        default=None, description="Ask a person before every call, whatever the access level."
    )


class ServerView(BaseModel):
    """A registration as the API shows it: header names, never their values."""

    id: str
    name: str
    description: str
    url: str
    transport: McpTransport
    header_names: list[str]
    enabled: bool
    status: McpServerStatus
    last_error: str | None
    checked_at: datetime | None
    tools_refreshed_at: datetime | None
    tools_count: int = 0
    tools_dropped: int
    created_at: datetime
    updated_at: datetime


class ToolView(BaseModel):
    """A server's tool as the API shows it."""

    tool_name: str
    name: str
    description: str
    input_schema: dict[str, Any]
    hints: dict[str, Any]
    problem: str | None
    read_only: bool
    always_ask: bool
    risk: str
