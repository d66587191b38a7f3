"""Knowledge bases, documents and chunks (knowledge)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    Computed,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    func,
)
from sqlalchemy.dialects.postgresql import ARRAY, REAL, TSVECTOR
from sqlalchemy.orm import Mapped, mapped_column

from weft_storage.base import Base


class KnowledgeBase(Base):
    """A tenant's collection of documents."""

    __tablename__ = "knowledge_bases"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(String(128), index=True)
    name: Mapped[str] = mapped_column(String(200))
    description: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    # Migration 0024_faq: what the base holds ('documents' or 'faq').
    kind: Mapped[str] = mapped_column(String(16), default="documents", server_default="documents")
    # Migration 0024_graph: entities and relations are extracted at ingestion (SPEC T-10).
    graph_enabled: Mapped[bool] = mapped_column(Boolean, default=False, server_default="false")
    # Migration 0024_wiki: pages generated from its documents at ingestion (SPEC T-18).
    wiki_enabled: Mapped[bool] = mapped_column(Boolean, default=False, server_default="false")


class Document(Base):
    """A document of a knowledge base."""

    __tablename__ = "documents"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(String(128), index=True)
    knowledge_base_id: Mapped[str] = mapped_column(
        String(64), ForeignKey("knowledge_bases.id", ondelete="CASCADE"), index=True
    )
    title: Mapped[str] = mapped_column(String(500))
    file_name: Mapped[str] = mapped_column(String(500), default="")
    status: Mapped[str] = mapped_column(String(16), default="ready")
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    # Migration 0002 (knowledge ingestion): progress and outcome of asynchronous ingestion.
    content_type: Mapped[str] = mapped_column(String(100), default="", server_default="")
    size_bytes: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    chunk_count: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    embedded_count: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    # Migration 0024_faq: labels an @tag mention narrows a search to (SPEC A-11).
    tags: Mapped[list[str]] = mapped_column(ARRAY(String(64)), default=list, server_default="{}")
    # Migration 0025_document_origin: the session the upload named (its wiki and graph
    # progress notices go there) and the budgets the gateway admitted it under.
    session_id: Mapped[str | None] = mapped_column(String(128), nullable=True)
    budget_tokens_per_minute: Mapped[int | None] = mapped_column(Integer, nullable=True)
    budget_tokens_per_day: Mapped[int | None] = mapped_column(BigInteger, nullable=True)


class Chunk(Base):
    """A piece of a document, indexed for keyword search (PostgreSQL full text, GIN)."""

    __tablename__ = "chunks"
    # Migration 0005: tenant and full text in one GIN index (btree_gin).
    __table_args__ = (Index("ix_chunks_tenant_tsv", "tenant_id", "tsv", postgresql_using="gin"),)
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(String(128), index=True)
    knowledge_base_id: Mapped[str] = mapped_column(String(64), index=True)
    document_id: Mapped[str] = mapped_column(
        String(64), ForeignKey("documents.id", ondelete="CASCADE"), index=True
    )
    position: Mapped[int] = mapped_column(Integer)
    content: Mapped[str] = mapped_column(Text)
    tsv: Mapped[Any] = mapped_column(
        TSVECTOR, Computed("to_tsvector('english', content)", persisted=True)
    )
    # Migration 0002: the chunk's embedding for semantic search (SPEC T-07).
    embedding: Mapped[list[float] | None] = mapped_column(ARRAY(REAL), nullable=True)


FAQ_TSV = (
    "setweight(to_tsvector('english', question), 'A') || "
    "setweight(to_tsvector('english', similar_text), 'A') || "
    "setweight(to_tsvector('english', answer), 'B')"
)


class FaqEntry(Base):
    """A question and its answer in an FAQ knowledge base (migration 0024_faq)."""

    __tablename__ = "faq_entries"
    __table_args__ = (
        Index("ix_faq_entries_tenant_tsv", "tenant_id", "tsv", postgresql_using="gin"),
    )
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(String(128), index=True)
    knowledge_base_id: Mapped[str] = mapped_column(
        String(64), ForeignKey("knowledge_bases.id", ondelete="CASCADE"), index=True
    )
    question: Mapped[str] = mapped_column(Text)
    similar_text: Mapped[str] = mapped_column(Text, default="", server_default="")
    """Other phrasings of the question, one per line."""
    answer: Mapped[str] = mapped_column(Text)
    tag: Mapped[str] = mapped_column(String(64), default="", server_default="")
    embedding: Mapped[list[float] | None] = mapped_column(ARRAY(REAL), nullable=True)
    embedding_job_id: Mapped[str | None] = mapped_column(String(64), nullable=True, index=True)
    """The job that still owes the embedding (``models_faq.FaqEmbeddingJob``, 0025)."""
    tsv: Mapped[Any] = mapped_column(TSVECTOR, Computed(FAQ_TSV, persisted=True))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
