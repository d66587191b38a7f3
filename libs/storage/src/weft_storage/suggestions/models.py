"""ORM models owned by the suggestions service (SPEC Q-01..Q-05).

``suggestion_turns`` is what the service learns of a turn from ``agent.events`` (the
question, the answer, its sources, the turn's credential): the generator reads only this,
never another service's tables. ``message_suggestion_sets`` is the cache of SPEC Q-04,
and ``suggestion_events`` the analytics of SPEC Q-05.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Boolean, DateTime, Index, Integer, String, Text, func, text
from sqlalchemy.orm import Mapped, mapped_column

from weft_storage.base import Base, JsonB


class SuggestionTurn(Base):
    """One turn as suggestions saw it: ``turn_started`` creates it, ``references`` and
    ``complete`` fill it in. The last few turns of a session are the generation's context
    (SPEC Q-02 ``max_context_turns``)."""

    __tablename__ = "suggestion_turns"
    __table_args__ = (
        Index("ix_suggestion_turns_session", "tenant_id", "session_id", "created_at"),
        Index("ix_suggestion_turns_created", "created_at"),
    )
    tenant_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    request_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    session_id: Mapped[str] = mapped_column(String(128))
    user_id: Mapped[str] = mapped_column(String(128))
    agent_id: Mapped[str] = mapped_column(String(128))
    user_message_id: Mapped[str] = mapped_column(String(128))
    query: Mapped[str] = mapped_column(Text)
    answer: Mapped[str | None] = mapped_column(Text, nullable=True)
    status: Mapped[str | None] = mapped_column(String(16), nullable=True)
    is_fallback: Mapped[bool] = mapped_column(Boolean, default=False, server_default="false")
    references: Mapped[list[dict[str, Any]]] = mapped_column(JsonB, default=list)
    credential: Mapped[str | None] = mapped_column(Text, nullable=True)
    locale: Mapped[str | None] = mapped_column(String(35), nullable=True)
    """The user's language as the request gave it (None: the service's default)."""
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    completed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


class MessageSuggestionSet(Base):
    """The suggestions of one assistant message for one placement, configuration and
    locale (SPEC Q-04). ``generating`` -> ``ready`` | ``suppressed`` | ``failed``; while
    generating, ``owner`` holds the claim and ``lease_until`` bounds it: a replica claims
    a set only when nobody holds a live lease, so replicas never generate it twice, and a
    crashed generator's set is taken over once its lease has passed."""

    __tablename__ = "message_suggestion_sets"
    __table_args__ = (
        Index("ix_suggestion_sets_session", "tenant_id", "session_id"),
        Index(
            "ix_suggestion_sets_leases",
            "lease_until",
            postgresql_where=text("state = 'generating'"),
        ),
    )
    tenant_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    assistant_message_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    placement: Mapped[str] = mapped_column(String(16), primary_key=True)
    config_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    locale: Mapped[str] = mapped_column(String(35), primary_key=True)
    session_id: Mapped[str] = mapped_column(String(128))
    request_id: Mapped[str] = mapped_column(String(128))
    config: Mapped[dict[str, Any]] = mapped_column(JsonB, default=dict)
    state: Mapped[str] = mapped_column(String(16))
    questions: Mapped[list[dict[str, Any]]] = mapped_column(JsonB, default=list)
    reason: Mapped[str] = mapped_column(String(200), default="", server_default="")
    owner: Mapped[str | None] = mapped_column(String(64), nullable=True)
    lease_until: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    generations: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


class SuggestionEvent(Base):
    """An impression, click, dismiss or regenerate of a suggestion (SPEC Q-05); a click
    is attributed to the user message that follows it in the session."""

    __tablename__ = "suggestion_events"
    __table_args__ = (
        Index("ix_suggestion_events_session", "tenant_id", "session_id", "created_at"),
        Index(
            "ix_suggestion_events_unattributed",
            "tenant_id",
            "session_id",
            postgresql_where=text("kind = 'click' AND attributed_message_id IS NULL"),
        ),
    )
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(String(128))
    session_id: Mapped[str] = mapped_column(String(128))
    user_id: Mapped[str] = mapped_column(String(128))
    assistant_message_id: Mapped[str] = mapped_column(String(128))
    placement: Mapped[str] = mapped_column(String(16))
    question_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    kind: Mapped[str] = mapped_column(String(16))
    attributed_message_id: Mapped[str | None] = mapped_column(String(128), nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
