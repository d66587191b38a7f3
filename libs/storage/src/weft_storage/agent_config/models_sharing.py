"""ORM models of agent sharing (SPEC A-10, E-26; migration 0005_agent_sharing).

The organisation model is deliberately small: an organisation has member *tenants*, each
with one role (viewer < editor < admin). Organisations and memberships are managed through
agent-config's internal API; there is no public organisation API yet.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Boolean, DateTime, ForeignKey, String, func
from sqlalchemy.orm import Mapped, mapped_column

from weft_storage.base import Base


class Organisation(Base):
    """A group of tenants agents can be shared with."""

    __tablename__ = "organisations"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


class OrganisationMember(Base):
    """A tenant's membership and role in an organisation."""

    __tablename__ = "organisation_members"
    organisation_id: Mapped[str] = mapped_column(
        String(64), ForeignKey("organisations.id", ondelete="CASCADE"), primary_key=True
    )
    tenant_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    role: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


class AgentShare(Base):
    """An owner tenant's agent shared with an organisation (one row per pair: re-sharing
    is idempotent)."""

    __tablename__ = "agent_shares"
    owner_tenant_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    agent_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    organisation_id: Mapped[str] = mapped_column(
        String(64), ForeignKey("organisations.id", ondelete="CASCADE"), primary_key=True
    )
    shared_by: Mapped[str] = mapped_column(String(128), default="")
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


class SharedAgentSetting(Base):
    """A recipient tenant's switch for an agent shared with it."""

    __tablename__ = "shared_agent_settings"
    tenant_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    agent_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    disabled: Mapped[bool] = mapped_column(Boolean, default=False)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
