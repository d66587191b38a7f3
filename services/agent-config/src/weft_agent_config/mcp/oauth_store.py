"""OAuth rows of agent-config (SPEC H-06): the client Weft registered per server, pending
states (hash only, single use) and users' tokens, every secret through the SecretBox."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import delete, select, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from weft_storage.agent_config.models_mcp import McpOAuthClient, McpOAuthState, McpUserToken

from weft_agent_config.mcp.secret_box import SecretBox


def state_hash(state: str) -> str:
    """What is stored of a state: its SHA-256 (a database read never yields a usable state)."""
    return hashlib.sha256(state.encode()).hexdigest()


class StateRefused(ValueError):
    """A callback's state is unknown, already used or expired (HTTP 400, with the reason)."""


@dataclass(frozen=True, kw_only=True)
class PendingState:
    """What a state is bound to."""

    tenant_id: str
    user_id: str
    session_id: str
    request_id: str
    call_id: str
    server_id: str
    verifier: str = field(repr=False)


class OAuthStore:
    """Clients, states and tokens."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession], box: SecretBox):
        self._sessions = sessions
        self._box = box

    async def client(self, server_id: str) -> McpOAuthClient | None:
        """The registered client of a server, if any."""
        async with self._sessions() as s:
            return await s.get(McpOAuthClient, server_id)

    def client_secret(self, row: McpOAuthClient) -> str | None:
        """The decrypted client secret (None for a public client)."""
        token = row.client_secret_encrypted
        return self._box.open(token) if token else None

    async def save_client(self, tenant_id: str, server_id: str, values: dict[str, Any]) -> None:
        """Store (or replace) a server's client; ``client_secret`` is encrypted here."""
        secret = values.pop("client_secret", None)
        row = {
            **values,
            "server_id": server_id,
            "tenant_id": tenant_id,
            "client_secret_encrypted": self._box.seal(secret) if secret else None,
        }
        stmt = insert(McpOAuthClient).values(**row)
        changed = {k: v for k, v in row.items() if k != "server_id"}
        async with self._sessions.begin() as s:
            await s.execute(stmt.on_conflict_do_update(index_elements=["server_id"], set_=changed))

    async def add_state(self, state: str, pending: PendingState, expires_at: datetime) -> None:
        """Remember a new state (its hash), bound to ``pending``; expired ones go."""
        row = McpOAuthState(
            state_hash=state_hash(state),
            tenant_id=pending.tenant_id,
            user_id=pending.user_id,
            session_id=pending.session_id,
            request_id=pending.request_id,
            call_id=pending.call_id,
            server_id=pending.server_id,
            verifier_encrypted=self._box.seal(pending.verifier),
            expires_at=expires_at,
        )
        async with self._sessions.begin() as s:
            await s.execute(delete(McpOAuthState).where(McpOAuthState.expires_at < _now()))
            s.add(row)

    async def consume_state(self, state: str) -> PendingState:
        """The state's binding, marking it used in the same transaction that reads it (the
        row locked FOR UPDATE): a second callback with it, even a concurrent one, is
        refused. :class:`StateRefused` when unknown, used or expired."""
        async with self._sessions.begin() as s:
            row = await s.scalar(
                select(McpOAuthState)
                .where(McpOAuthState.state_hash == state_hash(state))
                .with_for_update()
            )
            if row is None:
                raise StateRefused("unknown authorization state")
            if row.used_at is not None:
                raise StateRefused("this authorization state was already used")
            if row.expires_at <= _now():
                raise StateRefused("this authorization state has expired")
            row.used_at = _now()
            return PendingState(
                tenant_id=row.tenant_id,
                user_id=row.user_id,
                session_id=row.session_id,
                request_id=row.request_id,
                call_id=row.call_id,
                server_id=row.server_id,
                verifier=self._box.open(row.verifier_encrypted),
            )

    async def tokens(self, tenant_id: str, user_id: str, server_id: str) -> dict[str, Any] | None:
        """A user's tokens for a server (decrypted JSON), if any."""
        async with self._sessions() as s:
            row = await s.get(McpUserToken, (tenant_id, user_id, server_id))
        return self._box.open_json(row.tokens_encrypted) if row else None

    async def save_tokens(
        self, tenant_id: str, user_id: str, server_id: str, tokens: dict[str, Any]
    ) -> None:
        """Store a user's tokens for a server, encrypted."""
        expires = tokens.get("expires_at")
        row = {
            "tenant_id": tenant_id,
            "user_id": user_id,
            "server_id": server_id,
            "tokens_encrypted": self._box.seal_json(tokens),
            "expires_at": datetime.fromtimestamp(expires, UTC) if expires else None,
            "updated_at": _now(),
        }
        stmt = insert(McpUserToken).values(**row)
        keys = ["tenant_id", "user_id", "server_id"]
        changed = {k: v for k, v in row.items() if k not in keys}
        async with self._sessions.begin() as s:
            await s.execute(stmt.on_conflict_do_update(index_elements=keys, set_=changed))

    async def forget_tokens(self, tenant_id: str, user_id: str, server_id: str) -> None:
        """Drop a user's tokens (the server refused them)."""
        async with self._sessions.begin() as s:
            await s.execute(
                delete(McpUserToken).where(
                    McpUserToken.tenant_id == tenant_id,
                    McpUserToken.user_id == user_id,
                    McpUserToken.server_id == server_id,
                )
            )

    async def forget_client(self, server_id: str) -> None:
        """Drop a server's client and every user's tokens (its URL changed)."""
        async with self._sessions.begin() as s:
            await s.execute(delete(McpOAuthClient).where(McpOAuthClient.server_id == server_id))
            await s.execute(delete(McpUserToken).where(McpUserToken.server_id == server_id))
            await s.execute(
                update(McpOAuthState)
                .where(McpOAuthState.server_id == server_id, McpOAuthState.used_at.is_(None))
                .values(used_at=_now())
            )


def _now() -> datetime:
    return datetime.now(UTC)
