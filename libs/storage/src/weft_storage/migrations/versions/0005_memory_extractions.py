"""Memory: the extraction queue of long-term memory (SPEC M-10). One row per turn of an
agent with memory on, from ``turn_started`` to the facts stored (or the failure).

Revision ID: 0005_memory
Revises: 0004
"""

import sqlalchemy as sa
from alembic import op

revision = "0005_memory"
down_revision = "0004"
branch_labels = None
depends_on = None

_TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "memory_extractions",
        sa.Column("request_id", sa.String(64), primary_key=True),
        sa.Column("tenant_id", sa.String(128), nullable=False),
        sa.Column("user_id", sa.String(128), nullable=False),
        sa.Column("session_id", sa.String(64), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
        sa.Column("facts", sa.Integer, nullable=False, server_default="0"),
        sa.Column("error", sa.Text, nullable=True),
        sa.Column("not_before", _TS, nullable=False, server_default=sa.text("now()")),
        sa.Column("created_at", _TS, nullable=False, server_default=sa.text("now()")),
        sa.Column("updated_at", _TS, nullable=False, server_default=sa.text("now()")),
    )
    # Workers look only at rows still to do; done/failed/skipped rows stay out of the index.
    op.create_index(
        "ix_memory_extractions_todo",
        "memory_extractions",
        ["created_at"],
        postgresql_where=sa.text("status IN ('pending', 'running')"),
    )


def downgrade() -> None:
    op.drop_table("memory_extractions")
