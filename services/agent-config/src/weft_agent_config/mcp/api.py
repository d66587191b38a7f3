"""``/internal/mcp/servers...``: a tenant's registrations, which the gateway proxies as
``/api/v1/mcp/servers...`` with the caller's tenant and user (as it proxies agents).

Another tenant's server is the 404 of a missing one: never 403, which would confirm it
exists. Header values are write-only: no answer carries them.
"""

# No ``from __future__ import annotations``: FastAPI must see the route annotations.

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, Response
from weft_storage.agent_config.models_mcp import McpServer

from weft_agent_config.mcp.registration import (
    ServerCreate,
    ServerUpdate,
    ServerView,
    ToolFlags,
    ToolView,
)
from weft_agent_config.mcp.remote import UrlRefused
from weft_agent_config.mcp.secret_box import SecretsUnavailable, UnreadableSecret
from weft_agent_config.mcp.service import McpService, tool_view
from weft_agent_config.mcp.store import DuplicateName, TooManyServers


@asynccontextmanager
async def answered() -> AsyncIterator[None]:
    """The MCP errors as HTTP answers with their reason."""
    try:
        yield
    except (SecretsUnavailable, UnreadableSecret) as exc:
        raise HTTPException(503, str(exc)) from None
    except UrlRefused as exc:
        raise HTTPException(422, str(exc)) from None
    except (DuplicateName, TooManyServers) as exc:
        raise HTTPException(409, str(exc)) from None


def servers_router(svc: McpService) -> APIRouter:
    """CRUD, refresh, tools and per-tool flags of a tenant's MCP servers."""
    router = APIRouter(prefix="/internal/mcp/servers", tags=["mcp"])
    Tenant = Annotated[str, Query(min_length=1, max_length=128)]
    User = Annotated[str, Query(max_length=128)]

    async def existing(tenant_id: str, server_id: str) -> McpServer:
        server = await svc.store.get(tenant_id, server_id)
        if server is None:
            raise HTTPException(404, f"MCP server {server_id!r} not found")
        return server

    @router.get("")
    async def list_servers(tenant_id: Tenant, user_id: User = "") -> list[ServerView]:
        return [await svc.view(s) for s in await svc.store.list_servers(tenant_id)]

    @router.post("", status_code=201)
    async def register(tenant_id: Tenant, body: ServerCreate, user_id: User = "") -> ServerView:
        async with answered():
            return await svc.view(await svc.register(tenant_id, user_id, body))

    @router.get("/{server_id}")
    async def get(tenant_id: Tenant, server_id: str, user_id: User = "") -> ServerView:
        return await svc.view(await existing(tenant_id, server_id))

    @router.patch("/{server_id}")
    async def change(
        tenant_id: Tenant, server_id: str, body: ServerUpdate, user_id: User = ""
    ) -> ServerView:
        server = await existing(tenant_id, server_id)
        async with answered():
            return await svc.view(await svc.change(tenant_id, user_id, server, body))

    @router.delete("/{server_id}", status_code=204)
    async def delete(tenant_id: Tenant, server_id: str, user_id: User = "") -> Response:
        if not await svc.store.delete(tenant_id, server_id):
            raise HTTPException(404, f"MCP server {server_id!r} not found")
        return Response(status_code=204)

    @router.post("/{server_id}/refresh")
    async def refresh(tenant_id: Tenant, server_id: str, user_id: User = "") -> ServerView:
        server = await existing(tenant_id, server_id)
        async with answered():
            return await svc.view(await svc.check(server, user_id))

    @router.get("/{server_id}/tools")
    async def tools(tenant_id: Tenant, server_id: str, user_id: User = "") -> list[ToolView]:
        return await svc.tool_views(await existing(tenant_id, server_id))

    @router.patch("/{server_id}/tools/{tool_name}")
    async def flag_tool(
        tenant_id: Tenant, server_id: str, tool_name: str, body: ToolFlags, user_id: User = ""
    ) -> ToolView:
        flags = body.model_dump(exclude_none=True)
        row = await svc.store.set_tool_flags(tenant_id, server_id, tool_name, flags)
        if row is None:
            raise HTTPException(404, f"tool {tool_name!r} of MCP server {server_id!r} not found")
        return tool_view(row)

    return router
