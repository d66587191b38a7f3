"""Sessions and their messages (memory)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    Boolean,
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
from sqlalchemy.orm import Mapped, mapped_column

from weft_storage.base import Base, JsonB


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
