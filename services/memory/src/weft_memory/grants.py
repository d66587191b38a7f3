"""Grants (SPEC H-04): a person's standing approval of some tools, stored by memory.

A grant only spares a question the policy would ask (``weft_contracts.decide``): it is
the engine that weighs it, after the agent's access level and the tool's "always ask"
mark, so no grant widens what a key or an agent may do. Grants belong to one user of one
tenant; every read and write here is narrowed to the caller's.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, model_validator
from sqlalchemy import or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession
from weft_contracts import Grant, new_event_id
from weft_contracts.approvals import GrantScope
from weft_storage.memory.models_approvals import AgentGrant


class GrantLifetimes(BaseModel):
    """How long a grant made by "remember" (or without an expiry) lasts, per scope."""

    session_s: float = 24 * 3600
    agent_s: float = 30 * 24 * 3600

    def expiry(self, scope: GrantScope, now: datetime) -> datetime:
        """When a grant of ``scope`` made at ``now`` expires."""
        return now + timedelta(seconds=self.session_s if scope == "session" else self.agent_s)


class NewGrant(BaseModel):
    """``POST /internal/grants``: an explicit grant for the caller."""

    model_config = ConfigDict(extra="forbid")

    scope: GrantScope
    session_id: str | None = Field(default=None, min_length=1, max_length=128)
    agent_id: str = Field(min_length=1, max_length=128)
    operations: list[str] = Field(min_length=1, max_length=200)
    resources: list[str] = Field(default_factory=list, max_length=200)
    expires_at: AwareDatetime | None = Field(
        default=None, description="Default: the scope's lifetime from now."
    )

    @model_validator(mode="after")
    def _session_scope_names_a_session(self) -> NewGrant:
        if (self.scope == "session") != (self.session_id is not None):
            raise ValueError("session_id is required for scope session, and only for it")
        if any(not 1 <= len(op) <= 128 for op in self.operations):
            raise ValueError("each operation is a tool name of 1 to 128 characters")
        if any(not 1 <= len(r) <= 512 for r in self.resources):
            raise ValueError("each resource is 1 to 512 characters")
        if self.expires_at is not None and self.expires_at <= datetime.now(UTC):
            raise ValueError("expires_at must be in the future")
        return self


def grant_of(row: AgentGrant) -> Grant:
    """The contract model of a stored grant."""
    return Grant(
        grant_id=row.grant_id, tenant_id=row.tenant_id, user_id=row.user_id,
        scope=row.scope,
        session_id=row.session_id, agent_id=row.agent_id, operations=row.operations,
        resources=row.resources, created_at=row.created_at, expires_at=row.expires_at,
        revoked_at=row.revoked_at, source_prompt_id=row.source_prompt_id,
    )  # fmt: skip


def add_grant(
    s: AsyncSession,
    *,
    tenant_id: str,
    user_id: str,
    spec: NewGrant,
    expires_at: datetime,
    source_prompt_id: str | None = None,
) -> AgentGrant:
    """Stage a new grant in ``s`` (the caller's transaction)."""
    row = AgentGrant(
        grant_id=f"grt_{new_event_id()}", tenant_id=tenant_id, user_id=user_id,
        scope=spec.scope, session_id=spec.session_id, agent_id=spec.agent_id,
        operations=list(dict.fromkeys(spec.operations)), resources=list(spec.resources),
        created_at=datetime.now(UTC), expires_at=expires_at, source_prompt_id=source_prompt_id,
    )  # fmt: skip
    s.add(row)
    return row


async def live_grants(
    s: AsyncSession, *, tenant_id: str, user_id: str, session_id: str, agent_id: str
) -> list[Grant]:
    """The user's grants that apply in this session of this agent now."""
    now = datetime.now(UTC)
    query = select(AgentGrant).where(
        AgentGrant.tenant_id == tenant_id,
        AgentGrant.user_id == user_id,
        AgentGrant.agent_id == agent_id,
        AgentGrant.revoked_at.is_(None),
        or_(AgentGrant.expires_at.is_(None), AgentGrant.expires_at > now),
        or_(
            (AgentGrant.scope == "session") & (AgentGrant.session_id == session_id),
            AgentGrant.scope == "agent",
        ),
    )
    return [grant_of(row) for row in (await s.scalars(query.order_by(AgentGrant.created_at)))]


async def user_grants(
    s: AsyncSession,
    *,
    tenant_id: str,
    user_id: str,
    status: Literal["live", "all"],
    session_id: str | None = None,
    agent_id: str | None = None,
) -> list[Grant]:
    """The user's grants, newest first; ``live``: not revoked and not expired; only those
    of ``session_id`` or ``agent_id`` when given."""
    query = select(AgentGrant).where(
        AgentGrant.tenant_id == tenant_id, AgentGrant.user_id == user_id
    )
    if session_id is not None:
        query = query.where(AgentGrant.session_id == session_id)
    if agent_id is not None:
        query = query.where(AgentGrant.agent_id == agent_id)
    if status == "live":
        now = datetime.now(UTC)
        query = query.where(
            AgentGrant.revoked_at.is_(None),
            or_(AgentGrant.expires_at.is_(None), AgentGrant.expires_at > now),
        )
    rows = await s.scalars(query.order_by(AgentGrant.created_at.desc()).limit(1000))
    return [grant_of(row) for row in rows]


async def revoke(s: AsyncSession, *, tenant_id: str, user_id: str, grant_id: str) -> bool:
    """Revoke one of the user's grants (already revoked: unchanged); False when the user
    has no grant by that id."""
    row = await s.scalar(
        select(AgentGrant)
        .where(
            AgentGrant.grant_id == grant_id,
            AgentGrant.tenant_id == tenant_id,
            AgentGrant.user_id == user_id,
        )
        .with_for_update()
    )
    if row is None:
        return False
    if row.revoked_at is None:
        await s.execute(
            update(AgentGrant)
            .where(AgentGrant.grant_id == grant_id)
            .values(revoked_at=datetime.now(UTC))
        )
    return True
