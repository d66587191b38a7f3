"""Knowledge ingestion and semantic search: original files, ingestion progress, chunk
embeddings (SPEC T-07, T-08, T-09, T-12).

Revision ID: 0002
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql as pg

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

_TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.add_column(
        "documents", sa.Column("content_type", sa.String(100), nullable=False, server_default="")
    )
    op.add_column(
        "documents", sa.Column("size_bytes", sa.BigInteger, nullable=False, server_default="0")
    )
    op.add_column(
        "documents", sa.Column("chunk_count", sa.Integer, nullable=False, server_default="0")
    )
    op.add_column(
        "documents", sa.Column("embedded_count", sa.Integer, nullable=False, server_default="0")
    )
    op.add_column("documents", sa.Column("error", sa.Text, nullable=True))
    op.add_column(
        "documents", sa.Column("updated_at", _TS, nullable=False, server_default=sa.text("now()"))
    )
    # Ingestion workers claim pending documents with FOR UPDATE SKIP LOCKED on this index.
    op.create_index(
        "ix_documents_pending",
        "documents",
        ["created_at"],
        postgresql_where=sa.text("status IN ('pending', 'processing')"),
    )
    op.add_column("chunks", sa.Column("embedding", pg.ARRAY(sa.REAL), nullable=True))
    op.create_index("ix_chunks_document_position", "chunks", ["document_id", "position"])
    op.create_table(
        "document_files",
        sa.Column(
            "document_id",
            sa.String(64),
            sa.ForeignKey("documents.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("tenant_id", sa.String(128), nullable=False, index=True),
        sa.Column("file_name", sa.String(500), nullable=False),
        sa.Column("content_type", sa.String(100), nullable=False, server_default=""),
        sa.Column("content", sa.LargeBinary, nullable=False),
        sa.Column("created_at", _TS, nullable=False, server_default=sa.text("now()")),
    )


def downgrade() -> None:
    op.drop_table("document_files")
    op.drop_index("ix_chunks_document_position", table_name="chunks")
    op.drop_column("chunks", "embedding")
    op.drop_index("ix_documents_pending", table_name="documents")
    for column in (
        "updated_at",
        "error",
        "embedded_count",
        "chunk_count",
        "size_bytes",
        "content_type",
    ):
        op.drop_column("documents", column)
