"""A tenant's MCP servers (SPEC T-19, H-06): registrations with their encrypted headers,
the tools last listed with the tenant's per-tool flags, OAuth clients, pending OAuth states
(hashes only) and users' tokens. Owned by agent-config.

Revision ID: 0021_mcp_servers
Revises: 0020_prompt_deployment
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0021_mcp_servers"
down_revision = "0020_prompt_deployment"
branch_labels = None
depends_on = None

NOW = sa.text("now()")


def _server_fk() -> sa.ForeignKey:
    return sa.ForeignKey("mcp_servers.id", ondelete="CASCADE")


def upgrade() -> None:
    op.create_table(
        "mcp_servers",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("tenant_id", sa.String(128), nullable=False),
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("description", sa.Text, nullable=False, server_default=""),
        sa.Column("url", sa.Text, nullable=False),
        sa.Column("transport", sa.String(32), nullable=False),
        sa.Column("headers_encrypted", sa.Text, nullable=True),
        sa.Column("header_names", JSONB, nullable=False, server_default="[]"),
        sa.Column("enabled", sa.Boolean, nullable=False, server_default=sa.true()),
        sa.Column("status", sa.String(32), nullable=False, server_default="unknown"),
        sa.Column("last_error", sa.Text, nullable=True),
        sa.Column("checked_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("tools_refreshed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("tools_dropped", sa.Integer, nullable=False, server_default="0"),
        sa.Column("created_by", sa.String(128), nullable=False, server_default=""),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=NOW),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False, server_default=NOW),
        sa.UniqueConstraint("tenant_id", "name", name="uq_mcp_servers_name"),
    )
    op.create_index("ix_mcp_servers_tenant_id", "mcp_servers", ["tenant_id"])
    op.create_table(
        "mcp_server_tools",
        sa.Column("server_id", sa.String(64), _server_fk(), primary_key=True),
        sa.Column("tool_name", sa.String(256), primary_key=True),
        sa.Column("tenant_id", sa.String(128), nullable=False),
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("description", sa.Text, nullable=False, server_default=""),
        sa.Column("input_schema", JSONB, nullable=False, server_default="{}"),
        sa.Column("hints", JSONB, nullable=False, server_default="{}"),
        sa.Column("problem", sa.Text, nullable=True),
        sa.Column("listed", sa.Boolean, nullable=False, server_default=sa.true()),
        sa.Column("read_only", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("always_ask", sa.Boolean, nullable=False, server_default=sa.true()),
        sa.Column("position", sa.Integer, nullable=False, server_default="0"),
    )
    op.create_table(
        "mcp_oauth_clients",
        sa.Column("server_id", sa.String(64), _server_fk(), primary_key=True),
        sa.Column("tenant_id", sa.String(128), nullable=False),
        sa.Column("issuer", sa.Text, nullable=False),
        sa.Column("authorization_endpoint", sa.Text, nullable=False),
        sa.Column("token_endpoint", sa.Text, nullable=False),
        sa.Column("redirect_uri", sa.Text, nullable=False),
        sa.Column("scopes", sa.Text, nullable=False, server_default=""),
        sa.Column("client_id", sa.Text, nullable=False),
        sa.Column("client_secret_encrypted", sa.Text, nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=NOW),
    )
    op.create_table(
        "mcp_oauth_states",
        sa.Column("state_hash", sa.String(64), primary_key=True),
        sa.Column("tenant_id", sa.String(128), nullable=False),
        sa.Column("user_id", sa.String(128), nullable=False),
        sa.Column("session_id", sa.String(128), nullable=False),
        sa.Column("request_id", sa.String(128), nullable=False),
        sa.Column("call_id", sa.String(256), nullable=False),
        sa.Column("server_id", sa.String(64), _server_fk(), nullable=False),
        sa.Column("verifier_encrypted", sa.Text, nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("used_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=NOW),
    )
    op.create_index("ix_mcp_oauth_states_expires", "mcp_oauth_states", ["expires_at"])
    op.create_table(
        "mcp_user_tokens",
        sa.Column("tenant_id", sa.String(128), primary_key=True),
        sa.Column("user_id", sa.String(128), primary_key=True),
        sa.Column("server_id", sa.String(64), _server_fk(), primary_key=True),
        sa.Column("tokens_encrypted", sa.Text, nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False, server_default=NOW),
    )


def downgrade() -> None:
    for table in (
        "mcp_user_tokens", "mcp_oauth_states", "mcp_oauth_clients", "mcp_server_tools",
        "mcp_servers",
    ):  # fmt: skip
        op.drop_table(table)
