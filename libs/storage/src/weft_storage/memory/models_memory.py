"""ORM models owned by the memory service: long-term memories (SPEC M-10, T-17)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Computed, DateTime, Index, Integer, String, Text, func, text
from sqlalchemy.dialects.postgresql import TSVECTOR
from sqlalchemy.orm import Mapped, mapped_column

from weft_storage.base import Base


class Memory(Base):
    """One long-term fact about a caller, scoped to (tenant, user) (SPEC M-10).

    The id is derived from the scope and the normalised text, so extracting the same fact
    twice (a re-delivered event, a repeated statement) stores it once.
    """

    __tablename__ = "memories"
    __table_args__ = (
        Index("ix_memories_scope", "tenant_id", "user_id"),
        Index("ix_memories_tsv", "tsv", postgresql_using="gin"),
    )
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(String(128))
    user_id: Mapped[str] = mapped_column(String(128))
    content: Mapped[str] = mapped_column(Text)
    source_session_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    source_request_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    tsv: Mapped[Any] = mapped_column(
        TSVECTOR, Computed("to_tsvector('english', content)", persisted=True)
    )


class MemoryExtraction(Base):
    """The extraction of long-term facts from one turn (SPEC M-10), keyed by the turn.

    ``waiting`` (turn running, agent has memory on) -> ``pending`` (turn completed) ->
    ``running`` -> ``done`` | ``failed``; ``skipped`` when the turn did not complete or was
    deleted. A turn of an agent with memory off has no row at all.
    """

    __tablename__ = "memory_extractions"
    __table_args__ = (
        Index(
            "ix_memory_extractions_todo",
            "created_at",
            postgresql_where=text("status IN ('pending', 'running')"),
        ),
    )
    request_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(String(128))
    user_id: Mapped[str] = mapped_column(String(128))
    session_id: Mapped[str] = mapped_column(String(64))
    status: Mapped[str] = mapped_column(String(16))
    attempts: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    facts: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    not_before: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
