"""Human approvals (SPEC H-02..H-05): prompts with their timers, decisions, grants, the
suspended turns' states (memory owns them), and API key scopes (``approvals:decide``).

Revision ID: 0019_approvals
Revises: 0018_suggestion_locale
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0019_approvals"
down_revision = "0018_suggestion_locale"
branch_labels = None
depends_on = None

NOW = sa.text("now()")


def upgrade() -> None:
    op.add_column("api_keys", sa.Column("scopes", JSONB, nullable=True))
    op.create_table(
        "agent_prompts",
        sa.Column("prompt_id", sa.String(64), primary_key=True),
        sa.Column("tenant_id", sa.String(128), nullable=False),
        sa.Column("session_id", sa.String(128), nullable=False),
        sa.Column("request_id", sa.String(128), nullable=False),
        sa.Column("user_id", sa.String(128), nullable=False),
        sa.Column("agent_id", sa.String(128), nullable=False),
        sa.Column("call_id", sa.String(256), nullable=False),
        sa.Column("kind", sa.String(32), nullable=False, server_default="approval"),
        sa.Column("tool_name", sa.String(128), nullable=False),
        sa.Column("risk", sa.String(16), nullable=False),
        sa.Column("always_ask", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("arguments", JSONB, nullable=False, server_default="{}"),
        sa.Column("arguments_digest", sa.String(64), nullable=False),
        sa.Column("reason", sa.Text, nullable=False, server_default=""),
        sa.Column("status", sa.String(16), nullable=False, server_default="pending"),
        sa.Column("on_timeout", sa.String(16), nullable=False, server_default="deny"),
        sa.Column("approver_group", sa.String(128), nullable=True),
        sa.Column("timeout_s", sa.Float, nullable=False),
        sa.Column("escalation_timeout_s", sa.Float, nullable=False, server_default="3600"),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("turn_credential", sa.Text, nullable=True),
        sa.Column("event_id", sa.String(32), nullable=False),
        sa.Column("event_seq", sa.Integer, nullable=False, server_default="0"),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=NOW),
        sa.Column("decided_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("decided_by", sa.String(256), nullable=True),
        sa.Column("decision", sa.String(16), nullable=True),
        sa.Column("decision_reason", sa.Text, nullable=False, server_default=""),
        sa.Column("remember", sa.String(16), nullable=False, server_default="call"),
        sa.Column("fired_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_index(
        "ix_agent_prompts_due", "agent_prompts", ["expires_at"],
        postgresql_where=sa.text("status IN ('pending', 'escalated')"),
    )  # fmt: skip
    op.create_index(
        "ix_agent_prompts_session", "agent_prompts", ["tenant_id", "session_id", "created_at"]
    )
    op.create_index("ix_agent_prompts_request", "agent_prompts", ["request_id"])
    op.create_table(
        "approval_decisions",
        sa.Column("id", sa.BigInteger, primary_key=True, autoincrement=True),
        sa.Column("prompt_id", sa.String(64), nullable=False),
        sa.Column("tenant_id", sa.String(128), nullable=False),
        sa.Column("decided_by", sa.String(256), nullable=False),
        sa.Column("decision", sa.String(16), nullable=False),
        sa.Column("arguments", JSONB, nullable=True),
        sa.Column("reason", sa.Text, nullable=False, server_default=""),
        sa.Column("remember", sa.String(16), nullable=False, server_default="call"),
        sa.Column("applied", sa.Boolean, nullable=False, server_default=sa.true()),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False, server_default=NOW),
    )
    op.create_index("ix_approval_decisions_prompt", "approval_decisions", ["prompt_id", "id"])
    op.create_table(
        "agent_grants",
        sa.Column("grant_id", sa.String(64), primary_key=True),
        sa.Column("tenant_id", sa.String(128), nullable=False),
        sa.Column("user_id", sa.String(128), nullable=False),
        sa.Column("scope", sa.String(16), nullable=False),
        sa.Column("session_id", sa.String(128), nullable=True),
        sa.Column("agent_id", sa.String(128), nullable=False),
        sa.Column("operations", JSONB, nullable=False, server_default="[]"),
        sa.Column("resources", JSONB, nullable=False, server_default="[]"),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=NOW),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("source_prompt_id", sa.String(64), nullable=True),
    )
    op.create_index("ix_agent_grants_lookup", "agent_grants", ["tenant_id", "user_id", "agent_id"])
    op.create_index("ix_agent_grants_session", "agent_grants", ["tenant_id", "session_id"])
    op.create_table(
        "agent_run_suspensions",
        sa.Column("request_id", sa.String(128), primary_key=True),
        sa.Column("tenant_id", sa.String(128), nullable=False),
        sa.Column("session_id", sa.String(128), nullable=False),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("state", sa.LargeBinary, nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False, server_default=NOW),
    )


def downgrade() -> None:
    op.drop_table("agent_run_suspensions")
    op.drop_table("agent_grants")
    op.drop_table("approval_decisions")
    op.drop_table("agent_prompts")
    op.drop_column("api_keys", "scopes")
