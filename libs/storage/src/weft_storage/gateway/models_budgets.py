"""``tenant_budgets``: per-tenant overrides of the token budgets (NULL: default; 0: unlimited)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, DateTime, String, func
from sqlalchemy.orm import Mapped, mapped_column

from weft_storage.base import Base


class TenantBudget(Base):
    """A tenant's own token budgets; NULL keeps the default, 0 means unlimited."""

    __tablename__ = "tenant_budgets"
    tenant_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    tokens_per_minute: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    tokens_per_day: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
