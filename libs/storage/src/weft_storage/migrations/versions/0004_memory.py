"""Memory: compaction checkpoints, token scale and partial answers on messages; long-term
memories; full-text search over past conversations (SPEC M-02, M-07, M-10, T-17).

Revision ID: 0004
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql as pg

revision = "0004"
down_revision = "0001"
branch_labels = None
depends_on = None

_TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.add_column("messages", sa.Column("context_checkpoint", pg.JSONB, nullable=True))
    op.add_column("messages", sa.Column("context_token_scale", sa.Float, nullable=True))
    op.add_column(
        "messages",
        sa.Column("is_partial", sa.Boolean, nullable=False, server_default=sa.false()),
    )
    # The latest checkpoint of a session is one index probe, not a scan (SPEC M-08).
    op.create_index(
        "ix_messages_session_checkpoint",
        "messages",
        ["session_id", sa.text("created_at DESC"), sa.text("id DESC")],
        postgresql_where=sa.text("context_checkpoint IS NOT NULL"),
    )
    op.create_index(
        "ix_messages_content_tsv",
        "messages",
        [sa.text("to_tsvector('english', content)")],
        postgresql_using="gin",
    )
    op.create_index("ix_sessions_tenant_user", "sessions", ["tenant_id", "user_id"])
    op.create_table(
        "memories",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("tenant_id", sa.String(128), nullable=False),
        sa.Column("user_id", sa.String(128), nullable=False),
        sa.Column("content", sa.Text, nullable=False),
        sa.Column("source_session_id", sa.String(64), nullable=True),
        sa.Column("source_request_id", sa.String(64), nullable=True),
        sa.Column("created_at", _TS, nullable=False, server_default=sa.text("now()")),
        sa.Column(
            "tsv",
            pg.TSVECTOR,
            sa.Computed("to_tsvector('english', content)", persisted=True),
        ),
    )
    op.create_index("ix_memories_scope", "memories", ["tenant_id", "user_id"])
    op.create_index("ix_memories_tsv", "memories", ["tsv"], postgresql_using="gin")


def downgrade() -> None:
    op.drop_table("memories")
    op.drop_index("ix_sessions_tenant_user", table_name="sessions")
    op.drop_index("ix_messages_content_tsv", table_name="messages")
    op.drop_index("ix_messages_session_checkpoint", table_name="messages")
    for column in ("is_partial", "context_token_scale", "context_checkpoint"):
        op.drop_column("messages", column)
