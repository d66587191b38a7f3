"""Sharing agents with organisations (SPEC A-10, E-26): the store and its rules.

Organisation model (minimal, documented in docs/api.md): an organisation has member
tenants, each with one role, ``viewer`` < ``editor`` < ``admin``. Organisations and
memberships are managed through agent-config's internal API (no public route yet).
The tenant that owns an agent may share it with an organisation in which it is editor or
admin; every other member tenant then sees the agent read-only (viewer), may switch it
off for itself, and chats with it using the owner's model and knowledge bases.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy import and_, delete, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from ulid import ULID
from weft_storage.agent_config.models import Agent
from weft_storage.agent_config.models_sharing import (
    AgentShare,
    Organisation,
    OrganisationMember,
    SharedAgentSetting,
)

from weft_agent_config.definition import AgentDefinition
from weft_agent_config.tool_policy import normalize_allowed_tools

Role = Literal["viewer", "editor", "admin"]
ROLE_RANK: dict[str, int] = {"viewer": 0, "editor": 1, "admin": 2}
SHARER_MIN_ROLE: Role = "editor"


class SharingRefused(PermissionError):
    """The caller may not share this agent (HTTP 403)."""


class NotShareable(ValueError):
    """The agent lacks what a shared agent needs (HTTP 400)."""


@dataclass(frozen=True, kw_only=True)
class SharedAgentRef:
    """An agent another tenant shared with one of the caller's organisations."""

    agent_id: str
    owner_tenant_id: str
    organisation_ids: tuple[str, ...]
    disabled: bool


def check_shareable(agent: AgentDefinition) -> None:
    """SPEC A-10: a shared agent names its model, and its rerank model when it searches
    knowledge (the recipient cannot fall back to its own defaults)."""
    if not agent.model:
        raise NotShareable("an agent needs an explicit model to be shared (model)")
    tools = normalize_allowed_tools(agent.allowed_tools)
    if "search_knowledge" in tools and not agent.rerank_model_id:
        raise NotShareable(
            "an agent with search_knowledge needs a rerank model to be shared (rerank_model_id)"
        )


def check_sharer_role(role: str | None) -> None:
    """SPEC A-10: the sharing tenant must be editor or admin of the organisation."""
    if role is None:
        raise SharingRefused("your tenant is not a member of this organisation")
    if ROLE_RANK[role] < ROLE_RANK[SHARER_MIN_ROLE]:
        raise SharingRefused(f"sharing needs the editor role or above; your role is {role}")


class SharingStore:
    """Organisations, memberships, shares and recipients' switches in PostgreSQL."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession]):
        self._sessions = sessions

    async def create_organisation(self, name: str) -> str:
        """A new organisation's id."""
        org_id = f"org_{str(ULID()).lower()}"
        async with self._sessions.begin() as s:
            s.add(Organisation(id=org_id, name=name))
        return org_id

    async def organisation_exists(self, org_id: str) -> bool:
        """Whether the organisation exists."""
        async with self._sessions() as s:
            return await s.get(Organisation, org_id) is not None

    async def set_member(self, org_id: str, tenant_id: str, role: Role) -> None:
        """Add a tenant to an organisation or change its role."""
        stmt = insert(OrganisationMember).values(
            organisation_id=org_id, tenant_id=tenant_id, role=role
        )
        stmt = stmt.on_conflict_do_update(
            index_elements=["organisation_id", "tenant_id"], set_={"role": role}
        )
        async with self._sessions.begin() as s:
            await s.execute(stmt)

    async def role(self, org_id: str, tenant_id: str) -> str | None:
        """The tenant's role in the organisation, None when not a member."""
        async with self._sessions() as s:
            member = await s.get(OrganisationMember, (org_id, tenant_id))
        return member.role if member else None

    async def share(self, owner: str, agent_id: str, org_id: str, user_id: str) -> bool:
        """Share (idempotent); True when the share is new."""
        stmt = insert(AgentShare).values(
            owner_tenant_id=owner, agent_id=agent_id, organisation_id=org_id, shared_by=user_id
        )
        async with self._sessions.begin() as s:
            result: Any = await s.execute(stmt.on_conflict_do_nothing())
        return bool(result.rowcount)

    async def unshare(self, owner: str, agent_id: str, org_id: str) -> bool:
        """Stop sharing; False when it was not shared."""
        async with self._sessions.begin() as s:
            result: Any = await s.execute(
                delete(AgentShare).where(
                    AgentShare.owner_tenant_id == owner,
                    AgentShare.agent_id == agent_id,
                    AgentShare.organisation_id == org_id,
                )
            )
        return bool(result.rowcount)

    async def shares_of(self, owner: str, agent_id: str) -> list[dict[str, Any]]:
        """The organisations an owner's agent is shared with."""
        stmt = (
            select(AgentShare)
            .where(AgentShare.owner_tenant_id == owner, AgentShare.agent_id == agent_id)
            .order_by(AgentShare.created_at)
        )
        async with self._sessions() as s:
            rows = (await s.scalars(stmt)).all()
        return [
            {
                "organisation_id": r.organisation_id,
                "shared_by": r.shared_by,
                "created_at": r.created_at.isoformat() if r.created_at else None,
            }
            for r in rows
        ]

    async def shared_with(
        self, tenant_id: str, agent_id: str | None = None
    ) -> list[SharedAgentRef]:
        """Agents other tenants shared with the caller's organisations (one per agent)."""
        stmt = _visible_shares(tenant_id)
        if agent_id is not None:
            stmt = stmt.where(AgentShare.agent_id == agent_id)
        async with self._sessions() as s:
            rows = (await s.execute(stmt)).all()
        return [ref for ref, _ in _group_by_agent(rows)]

    async def shared_agents(self, tenant_id: str) -> list[tuple[SharedAgentRef, Agent]]:
        """:meth:`shared_with` together with each owner's live agent row, in one query
        (not a query per agent). Shares of an
        agent its owner deleted are left out."""
        stmt = (
            _visible_shares(tenant_id)
            .add_columns(Agent)
            .join(
                Agent,
                and_(
                    Agent.tenant_id == AgentShare.owner_tenant_id,
                    Agent.id == AgentShare.agent_id,
                    Agent.deleted_at.is_(None),
                ),
            )
        )
        async with self._sessions() as s:
            rows = (await s.execute(stmt)).all()
        return _group_by_agent(rows)

    async def find_shared(self, tenant_id: str, agent_id: str) -> SharedAgentRef | None:
        """The share through which ``tenant_id`` sees ``agent_id``, if any."""
        found = await self.shared_with(tenant_id, agent_id)
        return found[0] if found else None

    async def set_disabled(self, tenant_id: str, agent_id: str, disabled: bool) -> None:
        """A recipient switches a shared agent off (or on again) for its own tenant."""
        stmt = insert(SharedAgentSetting).values(
            tenant_id=tenant_id, agent_id=agent_id, disabled=disabled
        )
        stmt = stmt.on_conflict_do_update(
            index_elements=["tenant_id", "agent_id"], set_={"disabled": disabled}
        )
        async with self._sessions.begin() as s:
            await s.execute(stmt)


def _visible_shares(tenant_id: str) -> Any:
    """Rows (share, recipient's disabled switch) of the agents other tenants shared with
    an organisation ``tenant_id`` belongs to; one row per (agent, organisation)."""
    return (
        select(AgentShare, SharedAgentSetting.disabled)
        .join(
            OrganisationMember,
            and_(
                OrganisationMember.organisation_id == AgentShare.organisation_id,
                OrganisationMember.tenant_id == tenant_id,
            ),
        )
        .outerjoin(
            SharedAgentSetting,
            and_(
                SharedAgentSetting.tenant_id == tenant_id,
                SharedAgentSetting.agent_id == AgentShare.agent_id,
            ),
        )
        .where(AgentShare.owner_tenant_id != tenant_id)
        .order_by(AgentShare.created_at, AgentShare.agent_id)
    )


def _group_by_agent(rows: Sequence[Any]) -> list[tuple[SharedAgentRef, Any]]:
    """One ref per agent with all its organisations, in first-share order; the second item
    is the row's third column (the agent) when the query selected one."""
    refs: dict[str, tuple[SharedAgentRef, Any]] = {}
    for share, disabled, *extra in rows:
        known = refs.get(share.agent_id)
        orgs = (*known[0].organisation_ids, share.organisation_id) if known else ()
        ref = SharedAgentRef(
            agent_id=share.agent_id,
            owner_tenant_id=share.owner_tenant_id,
            organisation_ids=orgs or (share.organisation_id,),
            disabled=bool(disabled),
        )
        refs[share.agent_id] = (ref, extra[0] if extra else None)
    return list(refs.values())
