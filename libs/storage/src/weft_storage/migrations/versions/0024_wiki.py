"""The wiki of a knowledge base (SPEC T-18): pages with their revisions, links and
issues, the queue of documents whose pages the ingestion workers generate, and the
knowledge base's ``wiki_enabled`` flag.

An independent branch (it depends only on 0001, where the knowledge tables are made): expand only,
every new column has a server default, so the last release keeps working on it.
``pg_trgm`` (a trusted contrib extension, as ``btree_gin`` of 0005) indexes the pages'
text for ``wiki_search``'s regex and literal matches.

Revision ID: 0024_wiki
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql as pg

revision = "0024_wiki"
down_revision = "0001"
branch_labels = None
depends_on = None

_TS = sa.DateTime(timezone=True)


def _now() -> sa.Column[object]:
    return sa.Column("created_at", _TS, server_default=sa.func.now(), nullable=False)


def upgrade() -> None:
    op.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
    op.add_column(
        "knowledge_bases",
        sa.Column("wiki_enabled", sa.Boolean, nullable=False, server_default="false"),
    )
    op.create_table(
        "wiki_pages",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("tenant_id", sa.String(128), nullable=False, index=True),
        sa.Column(
            "knowledge_base_id",
            sa.String(64),
            sa.ForeignKey("knowledge_bases.id", ondelete="CASCADE"),
            nullable=False,
            index=True,
        ),
        sa.Column("slug", sa.String(200), nullable=False),
        sa.Column("title", sa.String(300), nullable=False),
        sa.Column("summary", sa.Text, nullable=False, server_default=""),
        sa.Column("content", sa.Text, nullable=False, server_default=""),
        sa.Column("page_type", sa.String(40), nullable=False, server_default="concept"),
        sa.Column("aliases", pg.ARRAY(sa.String(200)), nullable=False, server_default="{}"),
        sa.Column("source_refs", pg.JSONB, nullable=False, server_default="[]"),
        sa.Column(
            "source_document_ids", pg.ARRAY(sa.String(64)), nullable=False, server_default="{}"
        ),
        sa.Column("search_text", sa.Text, nullable=False, server_default=""),
        sa.Column("revision", sa.Integer, nullable=False, server_default="1"),
        _now(),
        sa.Column("updated_at", _TS, server_default=sa.func.now(), nullable=False),
        sa.UniqueConstraint("knowledge_base_id", "slug", name="uq_wiki_pages_kb_slug"),
    )
    op.create_index(
        "ix_wiki_pages_search_trgm",
        "wiki_pages",
        ["search_text"],
        postgresql_using="gin",
        postgresql_ops={"search_text": "gin_trgm_ops"},
    )
    op.create_index(
        "ix_wiki_pages_sources", "wiki_pages", ["source_document_ids"], postgresql_using="gin"
    )
    op.create_table(
        "wiki_page_revisions",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("tenant_id", sa.String(128), nullable=False, index=True),
        sa.Column("knowledge_base_id", sa.String(64), nullable=False, index=True),
        sa.Column(
            "page_id",
            sa.String(64),
            sa.ForeignKey("wiki_pages.id", ondelete="CASCADE"),
            nullable=False,
            index=True,
        ),
        sa.Column("revision", sa.Integer, nullable=False),
        sa.Column("slug", sa.String(200), nullable=False),
        sa.Column("title", sa.String(300), nullable=False),
        sa.Column("summary", sa.Text, nullable=False, server_default=""),
        sa.Column("content", sa.Text, nullable=False, server_default=""),
        sa.Column("change", sa.String(40), nullable=False),
        sa.Column("author", sa.String(64), nullable=False, server_default=""),
        _now(),
        sa.UniqueConstraint("page_id", "revision", name="uq_wiki_revisions_page"),
    )
    op.create_table(
        "wiki_links",
        sa.Column(
            "from_page_id",
            sa.String(64),
            sa.ForeignKey("wiki_pages.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("to_slug", sa.String(200), primary_key=True),
        sa.Column("tenant_id", sa.String(128), nullable=False, index=True),
        sa.Column("knowledge_base_id", sa.String(64), nullable=False),
    )
    op.create_index("ix_wiki_links_target", "wiki_links", ["knowledge_base_id", "to_slug"])
    op.create_table(
        "wiki_issues",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("tenant_id", sa.String(128), nullable=False, index=True),
        sa.Column(
            "knowledge_base_id",
            sa.String(64),
            sa.ForeignKey("knowledge_bases.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("slug", sa.String(200), nullable=False),
        sa.Column("issue_type", sa.String(40), nullable=False),
        sa.Column("description", sa.Text, nullable=False),
        sa.Column(
            "suspected_knowledge_ids",
            pg.ARRAY(sa.String(64)),
            nullable=False,
            server_default="{}",
        ),
        sa.Column("status", sa.String(16), nullable=False, server_default="pending"),
        sa.Column("reported_by", sa.String(64), nullable=False, server_default=""),
        _now(),
        sa.Column("updated_at", _TS, server_default=sa.func.now(), nullable=False),
    )
    op.create_index(
        "ix_wiki_issues_kb_slug", "wiki_issues", ["knowledge_base_id", "slug", "status"]
    )
    op.create_table(
        "wiki_generations",
        sa.Column(
            "document_id",
            sa.String(64),
            sa.ForeignKey("documents.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("tenant_id", sa.String(128), nullable=False, index=True),
        sa.Column("knowledge_base_id", sa.String(64), nullable=False, index=True),
        sa.Column("status", sa.String(16), nullable=False, server_default="pending"),
        sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
        sa.Column("pages", sa.Integer, nullable=False, server_default="0"),
        sa.Column("error", sa.Text, nullable=True),
        sa.Column("next_attempt_at", _TS, server_default=sa.func.now(), nullable=False),
        sa.Column("updated_at", _TS, server_default=sa.func.now(), nullable=False),
    )
    op.create_index("ix_wiki_generations_status", "wiki_generations", ["status", "next_attempt_at"])


def downgrade() -> None:
    for table in (
        "wiki_generations",
        "wiki_issues",
        "wiki_links",
        "wiki_page_revisions",
        "wiki_pages",
    ):
        op.drop_table(table)
    op.drop_column("knowledge_bases", "wiki_enabled")
