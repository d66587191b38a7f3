"""Metering and budgets: ``usage`` (one row per turn or ingested document, natural key
``(tenant_id, source, source_id)``) and ``tenant_budgets`` (per-tenant token budgets).

Revision ID: 0012_usage
Revises: 0009_suggestions
"""

import sqlalchemy as sa
from alembic import op

revision = "0012_usage"
down_revision = "0010_admin"
branch_labels = None
depends_on = None

_TS = sa.DateTime(timezone=True)
_NOW = sa.text("now()")


def upgrade() -> None:
    op.create_table(
        "usage",
        sa.Column("tenant_id", sa.String(128), primary_key=True),
        sa.Column("source", sa.String(16), primary_key=True),
        sa.Column("source_id", sa.String(128), primary_key=True),
        sa.Column("user_id", sa.String(128), nullable=False, server_default=""),
        sa.Column("agent_id", sa.String(128), nullable=False, server_default=""),
        sa.Column("input_tokens", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("output_tokens", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("llm_calls", sa.Integer, nullable=False, server_default="0"),
        sa.Column("tool_calls", sa.Integer, nullable=False, server_default="0"),
        sa.Column("ingestion_bytes", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("recorded_at", _TS, nullable=False, server_default=_NOW),
    )
    op.create_index("ix_usage_tenant_time", "usage", ["tenant_id", "recorded_at"])
    op.create_table(
        "tenant_budgets",
        sa.Column("tenant_id", sa.String(128), primary_key=True),
        sa.Column("tokens_per_minute", sa.BigInteger, nullable=True),
        sa.Column("tokens_per_day", sa.BigInteger, nullable=True),
        sa.Column("updated_at", _TS, nullable=False, server_default=_NOW),
    )


def downgrade() -> None:
    op.drop_table("tenant_budgets")
    op.drop_index("ix_usage_tenant_time", table_name="usage")
    op.drop_table("usage")
