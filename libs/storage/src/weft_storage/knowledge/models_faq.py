"""The embedding queue of FAQ entries (migration ``0025_faq_embedding_jobs``, SPEC C-04)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import DateTime, ForeignKey, Index, Integer, String, Text, func
from sqlalchemy.orm import Mapped, mapped_column

from weft_storage.base import Base


class FaqEmbeddingJob(Base):
    """The embeddings one write of FAQ entries (an import, a created or replaced entry)
    still owes: ``pending`` -> ``processing`` -> ``ready`` | ``failed``. The entries it
    embeds name it (``faq_entries.embedding_job_id``); ``input_tokens`` is the running
    total that is metered, so a retried job reports the same total again."""

    __tablename__ = "faq_embedding_jobs"
    __table_args__ = (Index("ix_faq_embedding_jobs_due", "status", "not_before"),)
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(String(128), index=True)
    knowledge_base_id: Mapped[str] = mapped_column(
        String(64), ForeignKey("knowledge_bases.id", ondelete="CASCADE"), index=True
    )
    user_id: Mapped[str] = mapped_column(String(128), default="", server_default="")
    status: Mapped[str] = mapped_column(String(16), default="pending")
    attempts: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    entry_count: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    embedded_count: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    input_tokens: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    embedding_calls: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    not_before: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
