"""MCP routes for the other services: tool-exec's catalog, connection and authorisation
start (a turn's request credential, audience agent-config: tenant and user come from the
credential, never from the query), the gateway's OAuth callback and the operators'
re-encrypt step (service credentials with one scope each)."""

# No ``from __future__ import annotations``: FastAPI must see the route annotations.

from dataclasses import dataclass
from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, Request
from weft_contracts.mcp import (
    McpAuthorizationCallback,
    McpAuthorizationCompleted,
    McpAuthorizationRequired,
    McpAuthorizationStart,
    McpCatalog,
    McpConnection,
)
from weft_platform.credentials import RequestCredential
from weft_platform.internal_auth import SystemRoute

from weft_agent_config.mcp.api import answered
from weft_agent_config.mcp.oauth_flow import AuthorizationUnavailable
from weft_agent_config.mcp.oauth_store import PendingState, StateRefused
from weft_agent_config.mcp.reencrypt import reencrypt_all
from weft_agent_config.mcp.service import McpService

CALLBACK_PATH = "/internal/mcp/oauth/callback"
CALLBACK_SCOPE = "mcp:oauth-callback"
"""The scope of the gateway's service credential here (weft_gateway.mcp_oauth)."""
CALLBACK_ROUTE = SystemRoute(CALLBACK_SCOPE, frozenset({"gateway", "operator"}))
REENCRYPT_PATH = "/internal/mcp/reencrypt"
REENCRYPT_ROUTE = SystemRoute("agent-config:mcp-reencrypt", frozenset({"operator"}))
SYSTEM_ROUTES = {CALLBACK_PATH: CALLBACK_ROUTE, REENCRYPT_PATH: REENCRYPT_ROUTE}


@dataclass(frozen=True)
class _Turn:
    """Who calls: a turn of a user of a tenant."""

    tenant_id: str
    user_id: str
    session_id: str
    request_id: str


def _caller(request: Request) -> _Turn:
    """The turn whose credential the call carries. Only a turn's credential (one naming
    its session and turn, what tool-exec presents for a call) is taken: an API request's
    credential, also meant for agent-config, never reaches these routes' secrets."""
    credential = getattr(request.state, "credential", None)
    if not isinstance(credential, RequestCredential):
        raise HTTPException(403, "this route needs a turn's request credential")
    if not credential.session_id or not credential.request_id:
        raise HTTPException(403, "this route needs a turn's credential, not an API request's")
    return _Turn(
        tenant_id=credential.tenant_id, user_id=credential.user_id,
        session_id=credential.session_id, request_id=credential.request_id,
    )  # fmt: skip


def internal_router(svc: McpService) -> APIRouter:
    """The routes of tool-exec, the gateway and operators."""
    router = APIRouter(prefix="/internal/mcp", tags=["mcp-internal"])

    @router.get("/catalog")
    async def catalog(
        request: Request,
        server_id: Annotated[list[str], Query(max_length=50)],
        refresh: bool = False,
    ) -> McpCatalog:
        who = _caller(request)
        async with answered():
            return await svc.catalog(who.tenant_id, who.user_id, server_id, refresh)

    @router.get("/servers/{server_id}/connection")
    async def connection(request: Request, server_id: str) -> McpConnection:
        who = _caller(request)
        server = await svc.access.one(who.tenant_id, server_id)
        if server is None:
            raise HTTPException(404, f"MCP server {server_id!r} not found")
        async with answered():
            return await svc.connection(server, who.tenant_id, who.user_id)

    @router.post("/servers/{server_id}/authorization")
    async def authorization(
        request: Request, server_id: str, body: McpAuthorizationStart
    ) -> McpAuthorizationRequired:
        who = _caller(request)
        server = await svc.access.one(who.tenant_id, server_id)
        if server is None:
            raise HTTPException(404, f"MCP server {server_id!r} not found")
        pending = PendingState(
            tenant_id=who.tenant_id, user_id=who.user_id, session_id=who.session_id,
            request_id=who.request_id, call_id=body.call_id, server_id=server.id, verifier="",
        )  # fmt: skip
        async with answered():
            try:
                return await svc.oauth.start(server, pending, body.www_authenticate, body.wait_s)
            except AuthorizationUnavailable as exc:
                raise HTTPException(502, str(exc)) from None

    @router.post("/oauth/callback")
    async def callback(body: McpAuthorizationCallback) -> McpAuthorizationCompleted:
        async with answered():
            try:
                pending = await svc.oauth.store.consume_state(body.state)
            except StateRefused as exc:
                raise HTTPException(400, str(exc)) from None
            server = await svc.access.one(pending.tenant_id, pending.server_id)
            if server is None:
                raise HTTPException(400, "the MCP server of this authorisation is gone")
            error = body.error or (None if body.code else "no authorization code")
            if error is None and body.code:
                try:
                    await svc.oauth.finish(server, pending, body.code)
                except AuthorizationUnavailable as exc:
                    error = str(exc)
        return McpAuthorizationCompleted(
            tenant_id=pending.tenant_id, user_id=pending.user_id, session_id=pending.session_id,
            request_id=pending.request_id, call_id=pending.call_id, server_id=server.id,
            server_name=server.name, outcome="denied" if error else "authorized",
            error=error[:500] if error else None,
        )  # fmt: skip

    @router.post("/reencrypt")
    async def reencrypt() -> dict[str, int]:
        async with answered():
            return await reencrypt_all(svc.store.sessions, svc.box)

    return router
