"""Keyword search scoped by tenant inside the full-text index (SPEC T-07, invariant 5).

Every keyword query filters on ``tenant_id`` and matches ``tsv``; with ``btree_gin`` one
GIN index holds both, so a query reads only its tenant's postings instead of every
tenant's and re-checking rows. It replaces the ``tsv``-only GIN index of 0001 (no query
searches ``tsv`` without a tenant). ``btree_gin`` is a trusted contrib extension: the
database owner can create it without superuser rights.

Revision ID: 0005_knowledge_keyword
Revises: 0002
"""

from alembic import op

revision = "0005_knowledge_keyword"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("CREATE EXTENSION IF NOT EXISTS btree_gin")
    op.create_index("ix_chunks_tenant_tsv", "chunks", ["tenant_id", "tsv"], postgresql_using="gin")
    op.drop_index("ix_chunks_tsv", table_name="chunks")


def downgrade() -> None:
    op.create_index("ix_chunks_tsv", "chunks", ["tsv"], postgresql_using="gin")
    op.drop_index("ix_chunks_tenant_tsv", table_name="chunks")
