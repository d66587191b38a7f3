"""The ``usage`` table: one row per metered fact with a natural key (memory records it)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, DateTime, Index, Integer, String, func
from sqlalchemy.orm import Mapped, mapped_column

from weft_storage.base import Base


class UsageRecord(Base):
    """One turn's or one document's consumption."""

    __tablename__ = "usage"
    __table_args__ = (Index("ix_usage_tenant_time", "tenant_id", "recorded_at"),)
    tenant_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    source: Mapped[str] = mapped_column(String(16), primary_key=True)
    source_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    user_id: Mapped[str] = mapped_column(String(128), default="", server_default="")
    agent_id: Mapped[str] = mapped_column(String(128), default="", server_default="")
    input_tokens: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    output_tokens: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    llm_calls: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    tool_calls: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    ingestion_bytes: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    recorded_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=func.now()
    )
