"""ORM models of metering and budgets.

``usage`` holds one row per metered fact with a natural key, ``(tenant_id, source,
source_id)``: a turn (``source='turn'``, its request id; tokens in/out, model calls, tool
calls) or an ingested document (``source='document'``, its id; bytes). A redelivered
event writes the same row again with the same values, so nothing is counted twice
(invariant 3). memory writes turn rows from ``complete``; the document routes write
document rows in the transaction that stores the document.

``tenant_budgets`` holds per-tenant overrides of the token budgets (NULL: the default
from settings; 0: unlimited).
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, DateTime, Index, Integer, String, func
from sqlalchemy.orm import Mapped, mapped_column

from weft_storage.models import Base


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


class TenantBudget(Base):
    """A tenant's own token budgets; NULL keeps the default, 0 means unlimited."""

    __tablename__ = "tenant_budgets"
    tenant_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    tokens_per_minute: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    tokens_per_day: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
