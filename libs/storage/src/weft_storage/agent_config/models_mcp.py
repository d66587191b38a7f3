"""ORM models of a tenant's MCP servers (SPEC T-19, H-06; migration 0021_mcp_servers).

agent-config owns every table here. Secrets (a registration's headers, an OAuth client's
secret, a PKCE verifier, a user's tokens) are stored only as ``MultiFernet`` tokens
(``*_encrypted`` columns, agent-config's ``SecretBox``); a header's name is kept in clear
so people can see which headers a registration sends. Every row carries ``tenant_id``, so
a tenant purge (agent-config's, ``weft_storage.owner_purge``) finds all of them.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    Boolean,
    DateTime,
    ForeignKey,
    ForeignKeyConstraint,
    Integer,
    String,
    Text,
    UniqueConstraint,
    func,
)
from sqlalchemy.orm import Mapped, mapped_column

from weft_storage.base import Base, JsonB


class McpServer(Base):
    """A tenant's registration of one MCP server."""

    __tablename__ = "mcp_servers"
    __table_args__ = (UniqueConstraint("tenant_id", "name", name="uq_mcp_servers_name"),)
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(String(128), index=True)
    name: Mapped[str] = mapped_column(String(64))
    description: Mapped[str] = mapped_column(Text, default="")
    url: Mapped[str] = mapped_column(Text)
    transport: Mapped[str] = mapped_column(String(32))
    headers_encrypted: Mapped[str | None] = mapped_column(Text, nullable=True)
    header_names: Mapped[list[str]] = mapped_column(JsonB, default=list)
    enabled: Mapped[bool] = mapped_column(Boolean, default=True)
    status: Mapped[str] = mapped_column(String(32), default="unknown")
    last_error: Mapped[str | None] = mapped_column(Text, nullable=True)
    checked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    tools_refreshed_at: Mapped[datetime | None] = mapped_column(
        DateTime(timezone=True), nullable=True
    )
    tools_dropped: Mapped[int] = mapped_column(Integer, default=0)
    created_by: Mapped[str] = mapped_column(String(128), default="")
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


class McpServerTool(Base):
    """One tool as the server last listed it, with the tenant's flags (kept across
    refreshes: a refresh updates the definition, never ``read_only`` / ``always_ask``)."""

    __tablename__ = "mcp_server_tools"
    server_id: Mapped[str] = mapped_column(
        String(64), ForeignKey("mcp_servers.id", ondelete="CASCADE"), primary_key=True
    )
    tool_name: Mapped[str] = mapped_column(String(256), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(String(128))
    name: Mapped[str] = mapped_column(String(64))
    description: Mapped[str] = mapped_column(Text, default="")
    input_schema: Mapped[dict[str, Any]] = mapped_column(JsonB, default=dict)
    hints: Mapped[dict[str, Any]] = mapped_column(JsonB, default=dict)
    problem: Mapped[str | None] = mapped_column(Text, nullable=True)
    listed: Mapped[bool] = mapped_column(Boolean, default=True)
    read_only: Mapped[bool] = mapped_column(Boolean, default=False)
    always_ask: Mapped[bool] = mapped_column(Boolean, default=True)
    position: Mapped[int] = mapped_column(Integer, default=0)


class McpOAuthClient(Base):
    """The OAuth client Weft registered (or was given) at a server's authorisation server."""

    __tablename__ = "mcp_oauth_clients"
    server_id: Mapped[str] = mapped_column(
        String(64), ForeignKey("mcp_servers.id", ondelete="CASCADE"), primary_key=True
    )
    tenant_id: Mapped[str] = mapped_column(String(128))
    issuer: Mapped[str] = mapped_column(Text)
    authorization_endpoint: Mapped[str] = mapped_column(Text)
    token_endpoint: Mapped[str] = mapped_column(Text)
    redirect_uri: Mapped[str] = mapped_column(Text)
    scopes: Mapped[str] = mapped_column(Text, default="")
    client_id: Mapped[str] = mapped_column(Text)
    client_secret_encrypted: Mapped[str | None] = mapped_column(Text, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


class McpOAuthState(Base):
    """A pending authorisation: only the state's SHA-256 is stored, used at most once."""

    __tablename__ = "mcp_oauth_states"
    state_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(String(128))
    user_id: Mapped[str] = mapped_column(String(128))
    session_id: Mapped[str] = mapped_column(String(128))
    request_id: Mapped[str] = mapped_column(String(128))
    call_id: Mapped[str] = mapped_column(String(256))
    server_id: Mapped[str] = mapped_column(
        String(64), ForeignKey("mcp_servers.id", ondelete="CASCADE")
    )
    verifier_encrypted: Mapped[str] = mapped_column(Text)
    expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    used_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


class McpUserToken(Base):
    """A user's OAuth tokens for one server (the user's tenant: a shared agent's server
    is authorised by the recipient's user, for that user)."""

    __tablename__ = "mcp_user_tokens"
    __table_args__ = (ForeignKeyConstraint(["server_id"], ["mcp_servers.id"], ondelete="CASCADE"),)
    tenant_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    user_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    server_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    tokens_encrypted: Mapped[str] = mapped_column(Text)
    expires_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
