"""The append-only log of administrative actions (table ``admin_audit``; the database
refuses UPDATE, DELETE and TRUNCATE on it)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from weft_storage.gateway.models_admin import AdminAuditEntry

Outcome = Literal["ok", "refused", "failed"]
"""ok: done; refused: the request was wrong (4xx); failed: the platform failed (5xx)."""


class AuditView(BaseModel):
    """One entry as the admin API shows it."""

    id: int
    at: datetime
    actor: str
    action: str
    target_type: str
    target_id: str
    outcome: str
    detail: dict[str, Any]
    error: str | None


class AuditFilter(BaseModel):
    """Filters of ``GET /admin/v1/audit``; every given one must match."""

    actor: str | None = None
    action: str | None = None
    target_type: str | None = None
    target_id: str | None = None
    outcome: Outcome | None = None
    since: datetime | None = None
    until: datetime | None = None
    before_id: int | None = None
    """Paging: entries older than this id (the last id of the previous page)."""


class AuditLog:
    """Appends and reads ``admin_audit``."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession]):
        self._sessions = sessions

    async def append(
        self,
        *,
        actor: str,
        action: str,
        target_type: str,
        target_id: str,
        outcome: Outcome,
        detail: dict[str, Any] | None = None,
        error: str | None = None,
    ) -> None:
        """Record one action (its own transaction: a refused action is recorded too)."""
        entry = AdminAuditEntry(
            actor=actor,
            action=action,
            target_type=target_type,
            target_id=target_id,
            outcome=outcome,
            detail=detail or {},
            error=error,
        )
        async with self._sessions.begin() as s:
            s.add(entry)

    async def read(self, where: AuditFilter, limit: int) -> list[AuditView]:
        """Newest first, at most ``limit``."""
        query = select(AdminAuditEntry)
        columns = {
            "actor": AdminAuditEntry.actor,
            "action": AdminAuditEntry.action,
            "target_type": AdminAuditEntry.target_type,
            "target_id": AdminAuditEntry.target_id,
            "outcome": AdminAuditEntry.outcome,
        }
        for name, column in columns.items():
            value = getattr(where, name)
            if value is not None:
                query = query.where(column == value)
        if where.since is not None:
            query = query.where(AdminAuditEntry.at >= where.since)
        if where.until is not None:
            query = query.where(AdminAuditEntry.at < where.until)
        if where.before_id is not None:
            query = query.where(AdminAuditEntry.id < where.before_id)
        query = query.order_by(AdminAuditEntry.id.desc()).limit(limit)
        async with self._sessions() as s:
            rows = await s.scalars(query)
            return [AuditView.model_validate(r, from_attributes=True) for r in rows]

    async def last_done(
        self, action: str, target_type: str, since: datetime, target_id: str | None = None
    ) -> dict[str, datetime]:
        """Targets ``action`` was done to (outcome ok) since ``since``, or only
        ``target_id``: id -> the last time."""
        at = func.max(AdminAuditEntry.at)
        query = (
            select(AdminAuditEntry.target_id, at)
            .where(AdminAuditEntry.action == action)
            .where(AdminAuditEntry.target_type == target_type)
            .where(AdminAuditEntry.outcome == "ok")
            .where(AdminAuditEntry.at >= since)
            .group_by(AdminAuditEntry.target_id)
        )
        if target_id is not None:
            query = query.where(AdminAuditEntry.target_id == target_id)
        async with self._sessions() as s:
            return {str(t): when for t, when in (await s.execute(query)).all()}
