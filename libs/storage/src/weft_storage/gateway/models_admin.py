"""ORM models of administration (migration 0010_admin): tenants and the audit log.

A tenant's ``settings`` hold its retention (``retention``: ``messages_days``,
``streams_days``), its identity provider (``identity_provider``: ``issuer``, ``audience``,
``jwks_url`` or ``jwks``, ``algorithms``) and the cap of its agents' access level
(``max_access_level``: read_only, confirm, auto_write or null). ``admin_audit`` is
append-only: a trigger refuses UPDATE, DELETE and TRUNCATE, whoever asks.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from sqlalchemy import BigInteger, DateTime, Index, String, Text, func
from sqlalchemy.orm import Mapped, mapped_column

from weft_storage.base import Base, JsonB

TenantStatus = Literal["active", "suspended", "deleting"]


class Tenant(Base):
    """A tenant; its keys answer 403 while it is ``suspended`` or ``deleting``."""

    __tablename__ = "tenants"
    id: Mapped[str] = mapped_column(String(128), primary_key=True)
    name: Mapped[str] = mapped_column(String(200), default="", server_default="")
    status: Mapped[str] = mapped_column(String(16), default="active", server_default="active")
    settings: Mapped[dict[str, Any]] = mapped_column(JsonB, default=dict, server_default="{}")
    issuer: Mapped[str | None] = mapped_column(String(500), nullable=True, unique=True)
    """The identity provider's ``iss``, unique: a token's issuer names one tenant only."""
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


class AdminAuditEntry(Base):
    """One administrative action: who, what, on which target, when, and how it ended."""

    __tablename__ = "admin_audit"
    __table_args__ = (
        Index("ix_admin_audit_target", "target_type", "target_id", "id"),
        Index("ix_admin_audit_at", "at"),
    )
    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    actor: Mapped[str] = mapped_column(String(200))
    action: Mapped[str] = mapped_column(String(64))
    target_type: Mapped[str] = mapped_column(String(32))
    target_id: Mapped[str] = mapped_column(String(256))
    outcome: Mapped[str] = mapped_column(String(16))
    detail: Mapped[dict[str, Any]] = mapped_column(JsonB, default=dict, server_default="{}")
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
