"""Knowledge graph (SPEC T-10): ``knowledge_bases.graph_enabled`` and the graph tables
knowledge owns (entities, relations, mentions, the extraction queue).

An independent branch on ``0001`` (it needs only the knowledge tables 0001 made). Every
row carries its tenant (purges find it by ``tenant_id``); relations and mentions cascade
from their chunk and document, so a replaced or deleted document takes what it sourced.

Revision ID: 0024_graph
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op

revision = "0024_graph"
down_revision = "0001"
branch_labels = None
depends_on = None

_TS = sa.DateTime(timezone=True)


def _fk(table: str) -> sa.ForeignKey:
    return sa.ForeignKey(f"{table}.id", ondelete="CASCADE")


def upgrade() -> None:
    op.add_column(
        "knowledge_bases",
        sa.Column("graph_enabled", sa.Boolean, nullable=False, server_default=sa.false()),
    )
    op.create_table(
        "graph_entities",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("tenant_id", sa.String(128), nullable=False, index=True),
        sa.Column("knowledge_base_id", sa.String(64), _fk("knowledge_bases"), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("normalized_name", sa.String(200), nullable=False),
        sa.Column("entity_type", sa.String(64), nullable=False, server_default=""),
        sa.Column("description", sa.Text, nullable=False, server_default=""),
        sa.Column("created_at", _TS, nullable=False, server_default=sa.text("now()")),
    )
    op.create_index(
        "ux_graph_entities_kb_name",
        "graph_entities",
        ["knowledge_base_id", "normalized_name"],
        unique=True,
    )
    op.create_index(
        "ix_graph_entities_tenant_name_prefix",
        "graph_entities",
        ["tenant_id", "knowledge_base_id", "normalized_name"],
        postgresql_ops={"normalized_name": "text_pattern_ops"},
    )
    op.create_table(
        "graph_relations",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("tenant_id", sa.String(128), nullable=False, index=True),
        sa.Column("knowledge_base_id", sa.String(64), nullable=False),
        sa.Column("source_entity_id", sa.String(64), _fk("graph_entities"), nullable=False,
                  index=True),
        sa.Column("target_entity_id", sa.String(64), _fk("graph_entities"), nullable=False,
                  index=True),
        sa.Column("relation", sa.String(200), nullable=False),
        sa.Column("description", sa.Text, nullable=False, server_default=""),
        sa.Column("chunk_id", sa.String(64), _fk("chunks"), nullable=False, index=True),
        sa.Column("document_id", sa.String(64), _fk("documents"), nullable=False),
    )  # fmt: skip
    op.create_table(
        "graph_mentions",
        sa.Column("entity_id", sa.String(64), _fk("graph_entities"), primary_key=True),
        sa.Column("chunk_id", sa.String(64), _fk("chunks"), primary_key=True, index=True),
        sa.Column("tenant_id", sa.String(128), nullable=False, index=True),
        sa.Column("knowledge_base_id", sa.String(64), nullable=False),
        sa.Column("document_id", sa.String(64), _fk("documents"), nullable=False),
    )
    op.create_table(
        "graph_extractions",
        sa.Column("document_id", sa.String(64), _fk("documents"), primary_key=True),
        sa.Column("tenant_id", sa.String(128), nullable=False, index=True),
        sa.Column("knowledge_base_id", sa.String(64), nullable=False, index=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
        sa.Column("entity_count", sa.Integer, nullable=False, server_default="0"),
        sa.Column("relation_count", sa.Integer, nullable=False, server_default="0"),
        sa.Column("error", sa.Text, nullable=True),
        sa.Column("not_before", _TS, nullable=False, server_default=sa.text("now()")),
        sa.Column("updated_at", _TS, nullable=False, server_default=sa.text("now()")),
    )


def downgrade() -> None:
    for table in ("graph_extractions", "graph_mentions", "graph_relations", "graph_entities"):
        op.drop_table(table)
    op.drop_column("knowledge_bases", "graph_enabled")
