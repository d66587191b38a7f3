"""The knowledge graph of a knowledge base (migration ``0024_graph``, SPEC T-10).

Entities are named once per knowledge base (``normalized_name`` is unique there); each
relation joins two entities and names the chunk it was read from; ``graph_mentions``
names the chunks each entity was read from. Chunks and documents cascade into both, so a
replaced or deleted document takes the relations and mentions it sourced with it; an
entity left without mentions is invisible to queries and pruned by the next extraction
of its knowledge base. ``graph_extractions`` is the extraction queue, one row per
document, retried with a bounded number of attempts.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import DateTime, ForeignKey, Index, Integer, String, Text, func
from sqlalchemy.orm import Mapped, mapped_column

from weft_storage.base import Base


class GraphEntity(Base):
    """A named thing of a knowledge base (a person, an organisation, a product...)."""

    __tablename__ = "graph_entities"
    __table_args__ = (
        Index("ux_graph_entities_kb_name", "knowledge_base_id", "normalized_name", unique=True),
        # Prefix matches of a query's long tokens (``LIKE 'token%'``) use this index.
        Index(
            "ix_graph_entities_tenant_name_prefix",
            "tenant_id",
            "knowledge_base_id",
            "normalized_name",
            postgresql_ops={"normalized_name": "text_pattern_ops"},
        ),
    )
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(String(128), index=True)
    knowledge_base_id: Mapped[str] = mapped_column(
        String(64), ForeignKey("knowledge_bases.id", ondelete="CASCADE")
    )
    name: Mapped[str] = mapped_column(String(200))
    normalized_name: Mapped[str] = mapped_column(String(200))
    entity_type: Mapped[str] = mapped_column(String(64), default="", server_default="")
    description: Mapped[str] = mapped_column(Text, default="", server_default="")
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


class GraphRelation(Base):
    """``source`` --relation--> ``target``, as one chunk states it."""

    __tablename__ = "graph_relations"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(String(128), index=True)
    knowledge_base_id: Mapped[str] = mapped_column(String(64))
    source_entity_id: Mapped[str] = mapped_column(
        String(64), ForeignKey("graph_entities.id", ondelete="CASCADE"), index=True
    )
    target_entity_id: Mapped[str] = mapped_column(
        String(64), ForeignKey("graph_entities.id", ondelete="CASCADE"), index=True
    )
    relation: Mapped[str] = mapped_column(String(200))
    description: Mapped[str] = mapped_column(Text, default="", server_default="")
    chunk_id: Mapped[str] = mapped_column(
        String(64), ForeignKey("chunks.id", ondelete="CASCADE"), index=True
    )
    document_id: Mapped[str] = mapped_column(
        String(64), ForeignKey("documents.id", ondelete="CASCADE")
    )


class GraphMention(Base):
    """An entity named in a chunk (its source chunks)."""

    __tablename__ = "graph_mentions"
    entity_id: Mapped[str] = mapped_column(
        String(64), ForeignKey("graph_entities.id", ondelete="CASCADE"), primary_key=True
    )
    chunk_id: Mapped[str] = mapped_column(
        String(64), ForeignKey("chunks.id", ondelete="CASCADE"), primary_key=True, index=True
    )
    tenant_id: Mapped[str] = mapped_column(String(128), index=True)
    knowledge_base_id: Mapped[str] = mapped_column(String(64))
    document_id: Mapped[str] = mapped_column(
        String(64), ForeignKey("documents.id", ondelete="CASCADE")
    )


class GraphExtraction(Base):
    """One document's extraction: ``pending`` -> ``processing`` -> ``ready`` | ``failed``;
    ``paused`` (back to ``pending`` at ``not_before``) while its tenant is over a budget."""

    __tablename__ = "graph_extractions"
    document_id: Mapped[str] = mapped_column(
        String(64), ForeignKey("documents.id", ondelete="CASCADE"), primary_key=True
    )
    tenant_id: Mapped[str] = mapped_column(String(128), index=True)
    knowledge_base_id: Mapped[str] = mapped_column(String(64), index=True)
    status: Mapped[str] = mapped_column(String(16), default="pending")
    attempts: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    entity_count: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    relation_count: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    not_before: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
