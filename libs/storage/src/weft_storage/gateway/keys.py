"""API keys, stored only as their SHA-256 (gateway)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import (
    DateTime,
    String,
    func,
)
from sqlalchemy.orm import Mapped, mapped_column

from weft_storage.base import Base, JsonB


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
