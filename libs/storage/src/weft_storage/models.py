"""ORM models of every table. Every row carries ``tenant_id`` (invariant 5).

One schema, one migration history for the skeleton; each service touches only the tables
it owns (gateway: api_keys; agent-config: agents; memory: sessions, messages, usage of
turns; tool-exec: knowledge_bases, documents, chunks; the document routes also write the
usage of the documents they store; ``tenant_budgets`` is read by the gateway and engine).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Computed,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB, REAL, TSVECTOR
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

JsonB = JSONB().with_variant(JSON(), "sqlite")


class Base(DeclarativeBase):
    """Declarative base of Weft's tables."""


class ApiKey(Base):
    """An API key, stored only as its SHA-256, mapped to a tenant and a user."""

    __tablename__ = "api_keys"
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(String(128), index=True)
    user_id: Mapped[str] = mapped_column(String(128))
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)
    name: Mapped[str] = mapped_column(String(200), default="")
    knowledge_base_ids: Mapped[list[str] | None] = mapped_column(JsonB, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    # Migration 0010_admin: a key stops working at this time (rotation overlap, expiry).
    expires_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    # Migration 0019_approvals: extra rights of the key (``approvals:decide``); None: none.
    scopes: Mapped[list[str] | None] = mapped_column(JsonB, nullable=True)


class Agent(Base):
    """A tenant's custom agent; built-ins live in YAML, not here."""

    __tablename__ = "agents"
    tenant_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    config: Mapped[dict[str, Any]] = mapped_column(JsonB, default=dict)
    created_by: Mapped[str] = mapped_column(String(128), default="", server_default="")
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    deleted_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


class ChatSession(Base):
    """A conversation of one user with agents."""

    __tablename__ = "sessions"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(String(128), index=True)
    user_id: Mapped[str] = mapped_column(String(128))
    title: Mapped[str] = mapped_column(String(500), default="")
    agent_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    deleted_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


class Message(Base):
    """A user or assistant message; the natural key is (request_id, role) (invariant 3)."""

    __tablename__ = "messages"
    __table_args__ = (
        UniqueConstraint("request_id", "role", name="uq_messages_request_role"),
        Index("ix_messages_session_created", "session_id", "created_at", "id"),
        # Migration 0008: unfinished turns, read by the engine's TurnAuditor every few seconds.
        Index(
            "ix_messages_unfinished",
            "created_at",
            postgresql_where=text("role = 'assistant' AND status = 'running'"),
        ),
    )
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(String(128), index=True)
    session_id: Mapped[str] = mapped_column(
        String(64), ForeignKey("sessions.id", ondelete="CASCADE")
    )
    request_id: Mapped[str] = mapped_column(String(64))
    role: Mapped[str] = mapped_column(String(16))
    content: Mapped[str] = mapped_column(Text, default="")
    agent_steps: Mapped[list[dict[str, Any]]] = mapped_column(JsonB, default=list)
    references: Mapped[list[dict[str, Any]]] = mapped_column(JsonB, default=list)
    is_completed: Mapped[bool] = mapped_column(Boolean, default=False)
    is_fallback: Mapped[bool] = mapped_column(Boolean, default=False)
    status: Mapped[str] = mapped_column(String(16), default="running")
    duration_ms: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    # Migration 0004 (memory): SPEC M-07 checkpoint, M-02 scale, partial answer on stop.
    context_checkpoint: Mapped[dict[str, Any] | None] = mapped_column(JsonB, nullable=True)
    context_token_scale: Mapped[float | None] = mapped_column(Float, nullable=True)
    is_partial: Mapped[bool] = mapped_column(Boolean, default=False)
    # Migration 0006: SPEC E-26, [{"url": ..., "description": str | None}] of a user message.
    images: Mapped[list[dict[str, Any]]] = mapped_column(JsonB, default=list)


class KnowledgeBase(Base):
    """A tenant's collection of documents."""

    __tablename__ = "knowledge_bases"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(String(128), index=True)
    name: Mapped[str] = mapped_column(String(200))
    description: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


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
