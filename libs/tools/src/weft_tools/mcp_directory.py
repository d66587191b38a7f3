"""agent-config's internal MCP routes, as tool-exec reaches them (SPEC T-19, H-06).

agent-config owns registrations, their secrets and users' tokens; tool-exec asks for the
catalog of a turn's servers and for one server's connection with the turn's credential
(audience ``agent-config``), which is where agent-config reads tenant and user from. The
connection holds decrypted secrets: it is used and dropped, never logged nor returned.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Protocol, TypeVar
from urllib.parse import quote

import httpx
from pydantic import BaseModel, ValidationError
from weft_contracts.mcp import (
    McpAuthorizationRequired,
    McpAuthorizationStart,
    McpCatalog,
    McpConnection,
)
from weft_mcp_client.safe_http import tls_context

DEFAULT_AGENT_CONFIG_URL = "http://127.0.0.1:8081"

_Answer = TypeVar("_Answer", bound=BaseModel)


class McpDirectoryError(Exception):
    """agent-config could not answer; ``str()`` is safe to show the model."""


class McpServerNotUsable(McpDirectoryError):
    """The server is unknown to this credential (another tenant's, deleted, disabled)."""


class McpDirectory(Protocol):
    """What tool-exec asks agent-config about MCP servers."""

    async def catalog(
        self, server_ids: list[str], *, refresh: bool, credential: str | None
    ) -> McpCatalog:
        """The servers among ``server_ids`` the credential may use, with their tools."""
        ...

    async def connection(self, server_id: str, *, credential: str | None) -> McpConnection:
        """How to reach ``server_id`` for the credential's user (secrets included)."""
        ...

    async def start_authorization(
        self, server_id: str, start: McpAuthorizationStart, *, credential: str | None
    ) -> McpAuthorizationRequired:
        """Begin the user's OAuth authorisation of ``server_id``."""
        ...


class HttpMcpDirectory:
    """:class:`McpDirectory` over agent-config's ``/internal/mcp`` routes."""

    def __init__(
        self,
        base_url: str | None = None,
        *,
        timeout_s: float = 15.0,
        transport: httpx.AsyncBaseTransport | None = None,
        event_hooks: Mapping[str, list[Any]] | None = None,
    ):
        """``event_hooks``: httpx hooks of every request (the process's trace
        propagation: the call's ``traceparent`` reaches agent-config)."""
        self._base_url = base_url or os.environ.get(
            "WEFT_AGENT_CONFIG_URL", DEFAULT_AGENT_CONFIG_URL
        )
        self._timeout_s = timeout_s
        self._transport = transport
        self._hooks = event_hooks

    def _client(self, credential: str | None) -> httpx.AsyncClient:
        headers = {"Authorization": f"Bearer {credential}"} if credential else {}
        return httpx.AsyncClient(
            base_url=self._base_url,
            headers=headers,
            timeout=self._timeout_s,
            transport=self._transport,
            verify=tls_context(),
            event_hooks=self._hooks,
        )

    async def _send(
        self,
        method: str,
        path: str,
        credential: str | None,
        *,
        params: httpx.QueryParams | None = None,
        body: bytes | None = None,
    ) -> httpx.Response:
        headers = {"Content-Type": "application/json"} if body is not None else None
        async with self._client(credential) as http:
            try:
                response = await http.request(
                    method, path, params=params, content=body, headers=headers
                )
            except httpx.HTTPError as exc:
                raise McpDirectoryError(
                    f"the MCP server directory is unavailable ({type(exc).__name__})"
                ) from None
        if response.status_code == 404:
            raise McpServerNotUsable("this MCP server is not available to this agent")
        if response.status_code >= 400:
            raise McpDirectoryError(
                f"the MCP server directory answered HTTP {response.status_code}"
            )
        return response

    async def catalog(
        self, server_ids: list[str], *, refresh: bool, credential: str | None
    ) -> McpCatalog:
        """``GET /internal/mcp/catalog?server_id=..&refresh=..``."""
        pairs = [("server_id", sid) for sid in server_ids]
        params = httpx.QueryParams([*pairs, ("refresh", "true" if refresh else "false")])
        response = await self._send("GET", "/internal/mcp/catalog", credential, params=params)
        return _parsed(McpCatalog, response)

    async def connection(self, server_id: str, *, credential: str | None) -> McpConnection:
        """``GET /internal/mcp/servers/{id}/connection``."""
        path = f"/internal/mcp/servers/{quote(server_id, safe='')}/connection"
        response = await self._send("GET", path, credential)
        return _parsed(McpConnection, response)

    async def start_authorization(
        self, server_id: str, start: McpAuthorizationStart, *, credential: str | None
    ) -> McpAuthorizationRequired:
        """``POST /internal/mcp/servers/{id}/authorization``."""
        path = f"/internal/mcp/servers/{quote(server_id, safe='')}/authorization"
        body = start.model_dump_json().encode()
        response = await self._send("POST", path, credential, body=body)
        return _parsed(McpAuthorizationRequired, response)


def _parsed(model: type[_Answer], response: httpx.Response) -> _Answer:
    """``response`` as ``model``; an answer that is not one is a directory error that
    names no value: pydantic's message quotes the input, which for a connection holds
    decrypted header values and the user's token (it would reach a log line and the
    model through the worker's error result)."""
    try:
        return model.model_validate_json(response.content)
    except ValidationError as exc:
        fields = sorted({".".join(map(str, e["loc"])) for e in exc.errors()})[:5]
        raise McpDirectoryError(
            f"the MCP server directory's answer is not a {model.__name__} "
            f"(fields: {', '.join(fields)})"
        ) from None
