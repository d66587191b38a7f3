"""FAQ knowledge bases and document tags (SPEC C-04, A-11; issue 39 items 4 and 7).

- ``knowledge_bases.kind``: ``documents`` (chunks of documents) or ``faq`` (question and
  answer entries); existing bases are document bases.
- ``faq_entries``: the entries of an FAQ base, tenant-scoped like every knowledge table;
  the question (and its variants) weigh more than the answer in the full-text vector, and
  one GIN index holds tenant and text as ``chunks`` does (0005); the embedding of the
  question serves semantic search.
- ``documents.tags``: labels an ``@tag`` mention narrows a search to.

An independent branch on ``0001`` (where these tables began): expand only, every new
column has a server default so the last release's inserts still work.

Revision ID: 0024_faq
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql as pg

revision = "0024_faq"
down_revision = "0001"
branch_labels = None
depends_on = None

_FAQ_TSV = (
    "setweight(to_tsvector('english', question), 'A') || "
    "setweight(to_tsvector('english', similar_text), 'A') || "
    "setweight(to_tsvector('english', answer), 'B')"
)


def upgrade() -> None:
    op.execute("CREATE EXTENSION IF NOT EXISTS btree_gin")
    op.add_column(
        "knowledge_bases",
        sa.Column("kind", sa.String(16), nullable=False, server_default="documents"),
    )
    op.add_column(
        "documents",
        sa.Column("tags", pg.ARRAY(sa.String(64)), nullable=False, server_default="{}"),
    )
    op.create_index("ix_documents_tags", "documents", ["tags"], postgresql_using="gin")
    op.create_table(
        "faq_entries",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("tenant_id", sa.String(128), nullable=False, index=True),
        sa.Column(
            "knowledge_base_id",
            sa.String(64),
            sa.ForeignKey("knowledge_bases.id", ondelete="CASCADE"),
            nullable=False,
            index=True,
        ),
        sa.Column("question", sa.Text, nullable=False),
        sa.Column("similar_text", sa.Text, nullable=False, server_default=""),
        sa.Column("answer", sa.Text, nullable=False),
        sa.Column("tag", sa.String(64), nullable=False, server_default=""),
        sa.Column("embedding", pg.ARRAY(sa.REAL), nullable=True),
        sa.Column("tsv", pg.TSVECTOR, sa.Computed(_FAQ_TSV, persisted=True)),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()")),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.text("now()")),
    )
    op.create_index(
        "ix_faq_entries_tenant_tsv", "faq_entries", ["tenant_id", "tsv"], postgresql_using="gin"
    )


def downgrade() -> None:
    op.drop_table("faq_entries")
    op.drop_index("ix_documents_tags", table_name="documents")
    op.drop_column("documents", "tags")
    op.drop_column("knowledge_bases", "kind")
