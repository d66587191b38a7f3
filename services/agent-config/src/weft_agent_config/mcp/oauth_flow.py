"""OAuth 2.1 for a tenant's MCP servers (SPEC H-06): starting an authorisation for a turn,
finishing it from the gateway's callback, and keeping a user's access token fresh.

The state handed to the authorisation server is 32 random bytes; only its SHA-256 is
stored, bound to tenant, user, session, turn, call and server, and it is used at most once
(``OAuthStore.consume_state``). The PKCE verifier is stored encrypted.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import asdict
from datetime import UTC, datetime, timedelta
from typing import Any

from weft_contracts.mcp import McpAuthorizationRequired
from weft_mcp_client.oauth import (
    OAuthClient,
    OAuthError,
    OAuthTokens,
    authorization_url,
    discover_client,
    exchange_code,
    pkce_pair,
    refresh,
)
from weft_storage.agent_config.models_mcp import McpOAuthClient, McpServer

from weft_agent_config.mcp.oauth_store import OAuthStore, PendingState
from weft_agent_config.mcp.remote import McpRemote


class AuthorizationUnavailable(ValueError):
    """The server's authorisation cannot be started (no OAuth metadata, registration
    refused...): HTTP 502 with the reason."""


class OAuthFlow:
    """Clients, states and tokens of MCP servers, through the pinned client."""

    def __init__(self, store: OAuthStore, remote: McpRemote, redirect_uri: str, state_ttl_s: float):
        self.store = store
        self._remote = remote
        self._redirect_uri = redirect_uri
        self._ttl = state_ttl_s

    async def start(
        self,
        server: McpServer,
        pending: PendingState,
        www_authenticate: str | None,
        wait_s: float | None = None,
    ) -> McpAuthorizationRequired:
        """Discover (or reuse) the OAuth client, store a new single-use state with its
        PKCE verifier, and answer the URL the user opens. The link lives as long as the
        turn waits for the user (``wait_s``), at least the configured TTL."""
        client = await self.client(server, www_authenticate)
        verifier, challenge = pkce_pair()
        state = secrets.token_urlsafe(32)
        life = max(self._ttl, wait_s or 0.0)
        expires_at = datetime.now(UTC) + timedelta(seconds=life)
        bound = PendingState(**{**asdict(pending), "verifier": verifier})
        await self.store.add_state(state, bound, expires_at)
        url = authorization_url(client, state=state, challenge=challenge, resource=server.url)
        return McpAuthorizationRequired(
            server_id=server.id, server_name=server.name, authorization_url=url,
            expires_at=expires_at,
        )  # fmt: skip

    async def client(self, server: McpServer, www_authenticate: str | None) -> OAuthClient:
        """The server's OAuth client: the stored one, else discovered and registered."""
        row = await self.store.client(server.id)
        known = self._from_row(row) if row and row.redirect_uri == self._redirect_uri else None
        try:
            client = await discover_client(
                server.url, www_authenticate, self._redirect_uri,
                factory=self._remote.factory, known=known,
            )  # fmt: skip
        except OAuthError as exc:
            raise AuthorizationUnavailable(f"cannot start the authorisation: {exc}") from None
        if known is None or client.client_id != known.client_id:
            await self.store.save_client(server.tenant_id, server.id, _client_values(client))
        return client

    async def finish(self, server: McpServer, pending: PendingState, code: str) -> None:
        """Exchange the code (with the state's verifier) and store the user's tokens."""
        row = await self.store.client(server.id)
        if row is None:
            raise AuthorizationUnavailable("the server's OAuth client is gone")
        try:
            tokens = await exchange_code(
                self._from_row(row), code=code, verifier=pending.verifier,
                resource=server.url, factory=self._remote.factory,
            )  # fmt: skip
        except OAuthError as exc:
            raise AuthorizationUnavailable(f"the authorization server refused: {exc}") from None
        await self.store.save_tokens(pending.tenant_id, pending.user_id, server.id, asdict(tokens))

    async def access_token(self, server: McpServer, tenant_id: str, user_id: str) -> str | None:
        """The user's access token for the server, refreshed when it has expired; None
        when there is none (or it expired and cannot be refreshed: authorise again)."""
        stored = await self.store.tokens(tenant_id, user_id, server.id)
        if stored is None:
            return None
        tokens = OAuthTokens(**stored)
        if not tokens.expired(now=time.time()):
            return tokens.access_token
        row = await self.store.client(server.id)
        try:
            if row is None:
                raise OAuthError("no OAuth client")
            fresh = await refresh(
                self._from_row(row), tokens, resource=server.url, factory=self._remote.factory
            )
        except OAuthError:
            await self.store.forget_tokens(tenant_id, user_id, server.id)
            return None
        await self.store.save_tokens(tenant_id, user_id, server.id, asdict(fresh))
        return fresh.access_token

    def _from_row(self, row: McpOAuthClient) -> OAuthClient:
        return OAuthClient(
            issuer=row.issuer,
            authorization_endpoint=row.authorization_endpoint,
            token_endpoint=row.token_endpoint,
            client_id=row.client_id,
            client_secret=self.store.client_secret(row),
            redirect_uri=row.redirect_uri,
            scopes=row.scopes or None,
        )


def _client_values(client: OAuthClient) -> dict[str, Any]:
    return {
        "issuer": client.issuer,
        "authorization_endpoint": client.authorization_endpoint,
        "token_endpoint": client.token_endpoint,
        "redirect_uri": client.redirect_uri,
        "scopes": client.scopes or "",
        "client_id": client.client_id,
        "client_secret": client.client_secret,
    }
