"""McpService: the rules of the MCP routes, public (a tenant's registrations) and internal
(tool-exec's catalog, connection and authorisation; the gateway's OAuth callback)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from weft_contracts.mcp import (
    McpCatalog,
    McpConnection,
    McpServerCatalog,
    McpToolDef,
    McpToolHints,
    registered_risk,
)
from weft_mcp_client.session import ListedTool, tool_def
from weft_storage.agent_config.models_mcp import McpServer, McpServerTool

from weft_agent_config.mcp.access import McpAccess
from weft_agent_config.mcp.oauth_flow import OAuthFlow
from weft_agent_config.mcp.registration import ServerCreate, ServerUpdate, ServerView, ToolView
from weft_agent_config.mcp.remote import McpRemote
from weft_agent_config.mcp.secret_box import SecretBox
from weft_agent_config.mcp.store import McpStore, new_server_id

MAX_CATALOG_SERVERS = 50


class McpService:
    """Registrations, health checks, the catalog and connections."""

    def __init__(
        self, store: McpStore, box: SecretBox, remote: McpRemote, access: McpAccess,
        oauth: OAuthFlow, *, max_servers: int, tools_ttl_s: float, connection_timeout_s: float,
    ):  # fmt: skip
        self.store = store
        self.box = box
        self.remote = remote
        self.access = access
        self.oauth = oauth
        self._max_servers = max_servers
        self._ttl = timedelta(seconds=tools_ttl_s)
        self._conn_timeout = connection_timeout_s

    # --- a tenant's registrations ------------------------------------------------------

    async def register(self, tenant_id: str, user_id: str, body: ServerCreate) -> McpServer:
        """Check the URL, store the registration (headers encrypted), then check its
        health: a server that is down still registers, with status ``error``."""
        self.box.seal("")  # SecretsUnavailable before anything is stored
        await self.remote.check_url(body.url)
        row = McpServer(
            id=new_server_id(), tenant_id=tenant_id, name=body.name,
            description=body.description, url=body.url, transport=body.transport,
            headers_encrypted=self.box.seal_json(body.headers) if body.headers else None,
            header_names=sorted(body.headers), enabled=body.enabled, status="unknown",
            tools_dropped=0, created_by=user_id,
        )  # fmt: skip
        stored = await self.store.insert(row, self._max_servers)
        return await self.check(stored, user_id)

    async def change(
        self, tenant_id: str, user_id: str, server: McpServer, body: ServerUpdate
    ) -> McpServer:
        """Apply a PATCH; a new URL, transport or headers is checked again."""
        values: dict[str, Any] = body.model_dump(exclude_unset=True, exclude={"headers"})
        if body.url is not None:
            await self.remote.check_url(body.url)
        if body.headers is not None:
            values["headers_encrypted"] = self.box.seal_json(body.headers) if body.headers else None
            values["header_names"] = sorted(body.headers)
        await self.store.update(tenant_id, server.id, values)
        if body.url is not None and body.url != server.url:
            await self.oauth.store.forget_client(server.id)  # tokens were for the old URL
        fresh = await self.store.get(tenant_id, server.id)
        assert fresh is not None
        if body.name is not None and body.name != server.name:
            await self.store.rename_tools(fresh)
        if {"url", "transport", "headers"} & body.model_fields_set:
            return await self.check(fresh, user_id)
        return fresh

    async def check(
        self, server: McpServer, user_id: str, tenant_id: str | None = None
    ) -> McpServer:
        """List the server's tools (as ``user_id`` of ``tenant_id``, with their token if
        any) and store the outcome."""
        conn = await self.connection(server, tenant_id or server.tenant_id, user_id)
        listing = await self.remote.list_tools(conn)
        await self.store.record_check(
            server, listing.status, listing.error, listing.tools, listing.dropped
        )
        fresh = await self.store.by_ids([server.id])
        return fresh[0] if fresh else server

    async def view(self, server: McpServer) -> ServerView:
        """The API's view of a registration."""
        count = len((await self.store.tools([server.id]))[server.id])
        return server_view(server, count)

    async def tool_views(self, server: McpServer) -> list[ToolView]:
        """The API's view of a server's tools."""
        return [tool_view(t) for t in (await self.store.tools([server.id]))[server.id]]

    # --- tool-exec -----------------------------------------------------------------------

    async def catalog(
        self, tenant_id: str, user_id: str, server_ids: Sequence[str], refresh: bool
    ) -> McpCatalog:
        """The servers among ``server_ids`` the tenant may use, with their tools, listed
        again when older than the TTL or on ``refresh``."""
        servers = await self.access.usable(tenant_id, list(server_ids)[:MAX_CATALOG_SERVERS])
        now = datetime.now(UTC)

        async def current(server: McpServer) -> McpServer:
            stale = server.tools_refreshed_at is None or now - server.tools_refreshed_at > self._ttl
            return await self.check(server, user_id, tenant_id) if refresh or stale else server

        # Listed side by side: one slow server costs its own check budget, not the sum.
        fresh = list(await asyncio.gather(*(current(server) for server in servers)))
        tools = await self.store.tools([s.id for s in fresh])
        return McpCatalog(servers=[catalog_entry(s, tools[s.id]) for s in fresh])

    async def connection(self, server: McpServer, tenant_id: str, user_id: str) -> McpConnection:
        """How to reach ``server`` as this user: decrypted headers, the user's token."""
        headers = self.box.open_json(server.headers_encrypted) if server.headers_encrypted else {}
        token = await self.oauth.access_token(server, tenant_id, user_id)
        return McpConnection(
            server_id=server.id, server_name=server.name, url=server.url,
            transport=server.transport,
            headers=headers, access_token=token, timeout_s=self._conn_timeout,
        )  # fmt: skip


def server_view(server: McpServer, tools_count: int) -> ServerView:
    """A registration without its secrets."""
    return ServerView(
        id=server.id, name=server.name, description=server.description, url=server.url,
        transport=server.transport,
        header_names=list(server.header_names or []), enabled=server.enabled,
        status=server.status,
        last_error=server.last_error, checked_at=server.checked_at,
        tools_refreshed_at=server.tools_refreshed_at, tools_count=tools_count,
        tools_dropped=server.tools_dropped, created_at=server.created_at,
        updated_at=server.updated_at,
    )  # fmt: skip


def tool_view(tool: McpServerTool) -> ToolView:
    """A stored tool with its flags and the risk they give it."""
    return ToolView(
        tool_name=tool.tool_name, name=tool.name, description=tool.description,
        input_schema=tool.input_schema, hints=tool.hints, problem=tool.problem,
        read_only=tool.read_only, always_ask=tool.always_ask,
        risk=registered_risk(tool.read_only),
    )  # fmt: skip


def tool_definition(server: McpServer, tool: McpServerTool) -> McpToolDef:
    """What the catalog says of a stored tool: ``weft_mcp_client.session.tool_def`` (the
    tenant's flags decide the risk, the server's hints are shown only; a refused tool
    keeps its problem and an empty schema)."""
    listed = ListedTool(
        name=tool.tool_name, description=tool.description,
        input_schema=tool.input_schema if tool.problem is None else {"type": "object"},
        hints=McpToolHints.model_validate(tool.hints or {}), problem=tool.problem,
    )  # fmt: skip
    return tool_def(
        server.id, server.name, listed, read_only=tool.read_only, always_ask=tool.always_ask
    )


def catalog_entry(server: McpServer, tools: list[McpServerTool]) -> McpServerCatalog:
    """One server of the catalog."""
    return McpServerCatalog(
        id=server.id, name=server.name, description=server.description,
        status=server.status,
        error=server.last_error, tools=[tool_definition(server, t) for t in tools],
        refreshed_at=server.tools_refreshed_at,
    )  # fmt: skip
