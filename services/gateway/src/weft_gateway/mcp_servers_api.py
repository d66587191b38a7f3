"""``/api/v1/mcp/servers...``: a tenant's MCP servers (SPEC T-19), proxied to agent-config
with the caller's tenant and user exactly as agents are (docs/mcp.md). agent-config owns the
registrations and their encrypted headers; another tenant's server is a 404 there."""

# No ``from __future__ import annotations``: FastAPI must see the route annotations.

from typing import Annotated, Any
from urllib.parse import quote

from fastapi import APIRouter, Body, Depends, Path, Response

from weft_gateway.auth import ApiKeyAuth, Principal
from weft_gateway.clients import ServiceClient

ServerId = Annotated[str, Path(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.:-]+$")]
ToolName = Annotated[str, Path(min_length=1, max_length=256)]
JsonBody = Annotated[dict[str, Any], Body(description="See agent-config's MCP server shapes.")]
PREFIX = "/internal/mcp/servers"


def mcp_servers_router(agents: ServiceClient, auth: ApiKeyAuth) -> APIRouter:
    """Register, list, change, delete and refresh servers; list tools, flag a tool."""
    router = APIRouter(prefix="/api/v1/mcp/servers", tags=["mcp"])
    Who = Annotated[Principal, Depends(auth)]

    def scope(who: Principal) -> dict[str, str]:
        return {"tenant_id": who.tenant_id, "user_id": who.user_id}

    @router.get("")
    async def list_mcp_servers(who: Who) -> Any:
        return await agents.call("GET", PREFIX, params=scope(who))

    @router.post("", status_code=201)
    async def register_mcp_server(who: Who, body: JsonBody) -> Any:
        """Register a server (headers are stored encrypted, never returned); its tools are
        listed at once (status ok, error or authorization_required)."""
        return await agents.call("POST", PREFIX, params=scope(who), json=body)

    @router.get("/{server_id}")
    async def get_mcp_server(who: Who, server_id: ServerId) -> Any:
        return await agents.call("GET", f"{PREFIX}/{server_id}", params=scope(who))

    @router.patch("/{server_id}")
    async def change_mcp_server(who: Who, server_id: ServerId, body: JsonBody) -> Any:
        return await agents.call("PATCH", f"{PREFIX}/{server_id}", params=scope(who), json=body)

    @router.delete("/{server_id}", status_code=204)
    async def delete_mcp_server(who: Who, server_id: ServerId) -> Response:
        await agents.call("DELETE", f"{PREFIX}/{server_id}", params=scope(who))
        return Response(status_code=204)

    @router.post("/{server_id}/refresh")
    async def refresh_mcp_server(who: Who, server_id: ServerId) -> Any:
        return await agents.call("POST", f"{PREFIX}/{server_id}/refresh", params=scope(who))

    @router.get("/{server_id}/tools")
    async def list_mcp_tools(who: Who, server_id: ServerId) -> Any:
        return await agents.call("GET", f"{PREFIX}/{server_id}/tools", params=scope(who))

    @router.patch("/{server_id}/tools/{tool_name}")
    async def flag_mcp_tool(
        who: Who, server_id: ServerId, tool_name: ToolName, body: JsonBody
    ) -> Any:
        """Set ``read_only`` / ``always_ask`` of one tool (kept across refreshes)."""
        path = f"{PREFIX}/{server_id}/tools/{quote(tool_name, safe='')}"
        return await agents.call("PATCH", path, params=scope(who), json=body)

    return router
