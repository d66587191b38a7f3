"""Initial schema: api keys, agents, sessions, messages, knowledge bases, documents, chunks.

Revision ID: 0001
Revises:
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql as pg

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

_TS = sa.DateTime(timezone=True)


def _now() -> sa.TextClause:
    return sa.text("now()")


def upgrade() -> None:
    op.create_table(
        "api_keys",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("tenant_id", sa.String(128), nullable=False, index=True),
        sa.Column("user_id", sa.String(128), nullable=False),
        sa.Column("key_hash", sa.String(64), nullable=False, unique=True),
        sa.Column("name", sa.String(200), nullable=False, server_default=""),
        sa.Column("knowledge_base_ids", pg.JSONB, nullable=True),
        sa.Column("created_at", _TS, nullable=False, server_default=_now()),
        sa.Column("revoked_at", _TS, nullable=True),
    )
    op.create_table(
        "agents",
        sa.Column("tenant_id", sa.String(128), primary_key=True),
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("config", pg.JSONB, nullable=False, server_default="{}"),
        sa.Column("created_at", _TS, nullable=False, server_default=_now()),
        sa.Column("updated_at", _TS, nullable=False, server_default=_now()),
        sa.Column("deleted_at", _TS, nullable=True),
    )
    op.create_table(
        "sessions",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("tenant_id", sa.String(128), nullable=False, index=True),
        sa.Column("user_id", sa.String(128), nullable=False),
        sa.Column("title", sa.String(500), nullable=False, server_default=""),
        sa.Column("agent_id", sa.String(64), nullable=True),
        sa.Column("created_at", _TS, nullable=False, server_default=_now()),
        sa.Column("updated_at", _TS, nullable=False, server_default=_now()),
        sa.Column("deleted_at", _TS, nullable=True),
    )
    op.create_table(
        "messages",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("tenant_id", sa.String(128), nullable=False, index=True),
        sa.Column(
            "session_id",
            sa.String(64),
            sa.ForeignKey("sessions.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("request_id", sa.String(64), nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("content", sa.Text, nullable=False, server_default=""),
        sa.Column("agent_steps", pg.JSONB, nullable=False, server_default="[]"),
        sa.Column("references", pg.JSONB, nullable=False, server_default="[]"),
        sa.Column("is_completed", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("is_fallback", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("status", sa.String(16), nullable=False, server_default="running"),
        sa.Column("duration_ms", sa.Integer, nullable=False, server_default="0"),
        sa.Column("created_at", _TS, nullable=False),
        sa.UniqueConstraint("request_id", "role", name="uq_messages_request_role"),
    )
    op.create_index(
        "ix_messages_session_created",
        "messages",
        ["session_id", sa.text("created_at DESC"), sa.text("id DESC")],
    )
    op.create_table(
        "knowledge_bases",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("tenant_id", sa.String(128), nullable=False, index=True),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("description", sa.Text, nullable=False, server_default=""),
        sa.Column("created_at", _TS, nullable=False, server_default=_now()),
    )
    op.create_table(
        "documents",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("tenant_id", sa.String(128), nullable=False, index=True),
        sa.Column(
            "knowledge_base_id",
            sa.String(64),
            sa.ForeignKey("knowledge_bases.id", ondelete="CASCADE"),
            nullable=False,
            index=True,
        ),
        sa.Column("title", sa.String(500), nullable=False),
        sa.Column("file_name", sa.String(500), nullable=False, server_default=""),
        sa.Column("status", sa.String(16), nullable=False, server_default="ready"),
        sa.Column("created_at", _TS, nullable=False, server_default=_now()),
    )
    op.create_table(
        "chunks",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("tenant_id", sa.String(128), nullable=False, index=True),
        sa.Column("knowledge_base_id", sa.String(64), nullable=False, index=True),
        sa.Column(
            "document_id",
            sa.String(64),
            sa.ForeignKey("documents.id", ondelete="CASCADE"),
            nullable=False,
            index=True,
        ),
        sa.Column("position", sa.Integer, nullable=False),
        sa.Column("content", sa.Text, nullable=False),
        sa.Column(
            "tsv",
            pg.TSVECTOR,
            sa.Computed("to_tsvector('english', content)", persisted=True),
        ),
    )
    op.create_index("ix_chunks_tsv", "chunks", ["tsv"], postgresql_using="gin")


def downgrade() -> None:
    for table in (
        "chunks",
        "documents",
        "knowledge_bases",
        "messages",
        "sessions",
        "agents",
        "api_keys",
    ):
        op.drop_table(table)
