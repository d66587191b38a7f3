"""The embedding queue of FAQ entries (SPEC C-04; issue 39 item 4).

- ``faq_embedding_jobs``: the embeddings one write of entries owes, claimed by the
  ingestion workers off the request path, retried with a bounded number of attempts,
  its progress shown on the knowledge base and its tokens metered through memory.
- ``faq_entries.embedding_job_id``: the job that embeds the entry (NULL: embedded, or
  written before this revision, or no embedder).

On ``0024_faq``: expand only (a new table, a nullable column), so the last release's
code runs unchanged on it.

Revision ID: 0025_faq_embedding_jobs
Revises: 0024_faq
"""

import sqlalchemy as sa
from alembic import op

revision = "0025_faq_embedding_jobs"
down_revision = "0024_faq"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "faq_embedding_jobs",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("tenant_id", sa.String(128), nullable=False, index=True),
        sa.Column(
            "knowledge_base_id",
            sa.String(64),
            sa.ForeignKey("knowledge_bases.id", ondelete="CASCADE"),
            nullable=False,
            index=True,
        ),
        sa.Column("user_id", sa.String(128), nullable=False, server_default=""),
        sa.Column("status", sa.String(16), nullable=False, server_default="pending"),
        sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
        sa.Column("entry_count", sa.Integer, nullable=False, server_default="0"),
        sa.Column("embedded_count", sa.Integer, nullable=False, server_default="0"),
        sa.Column("input_tokens", sa.Integer, nullable=False, server_default="0"),
        sa.Column("embedding_calls", sa.Integer, nullable=False, server_default="0"),
        sa.Column("error", sa.Text, nullable=True),
        sa.Column("not_before", sa.DateTime(timezone=True), server_default=sa.text("now()")),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()")),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.text("now()")),
    )
    op.create_index("ix_faq_embedding_jobs_due", "faq_embedding_jobs", ["status", "not_before"])
    op.add_column("faq_entries", sa.Column("embedding_job_id", sa.String(64), nullable=True))
    op.create_index("ix_faq_entries_embedding_job_id", "faq_entries", ["embedding_job_id"])


def downgrade() -> None:
    op.drop_index("ix_faq_entries_embedding_job_id", table_name="faq_entries")
    op.drop_column("faq_entries", "embedding_job_id")
    op.drop_table("faq_embedding_jobs")
