"""AgentStore: a tenant's custom agents in PostgreSQL; every query carries the tenant
(invariant 5), deletes are soft."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from ulid import ULID
from weft_storage.agent_config.models import Agent

from weft_agent_config.definition import AgentDefinition, display_name


class StoredAgent:
    """A custom agent row as the API returns it."""

    def __init__(self, row: Agent):
        self.id = row.id
        self.definition = AgentDefinition.model_validate({"name": row.name, **row.config})
        self.created_by = row.created_by
        self.created_at = row.created_at
        self.updated_at = row.updated_at


def new_agent_id() -> str:
    """Custom agent ids never collide with the ``builtin-`` namespace."""
    return f"agt_{str(ULID()).lower()}"


class AgentStore:
    """CRUD of custom agents, scoped by tenant."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession]):
        self._sessions = sessions

    async def get(self, tenant_id: str, agent_id: str) -> StoredAgent | None:
        """The live agent, or None (also for another tenant's id)."""
        async with self._sessions() as s:
            row = await s.scalar(_live(tenant_id).where(Agent.id == agent_id))
        return StoredAgent(row) if row else None

    async def list(self, tenant_id: str) -> list[StoredAgent]:
        """The tenant's live agents, oldest first."""
        async with self._sessions() as s:
            rows = await s.scalars(_live(tenant_id).order_by(Agent.created_at, Agent.id))
            return [StoredAgent(r) for r in rows]

    async def create(
        self, tenant_id: str, user_id: str, definition: AgentDefinition
    ) -> StoredAgent:
        """Insert a new agent with a fresh id."""
        row = Agent(
            tenant_id=tenant_id,
            id=new_agent_id(),
            name=display_name(definition.name)[:200],
            config=_config(definition),
            created_by=user_id,
        )
        async with self._sessions.begin() as s:
            s.add(row)
        async with self._sessions() as s:
            fresh = await s.scalar(_live(tenant_id).where(Agent.id == row.id))
        assert fresh is not None
        return StoredAgent(fresh)

    async def replace(
        self, tenant_id: str, agent_id: str, definition: AgentDefinition
    ) -> StoredAgent | None:
        """Overwrite a live agent's definition; None when it does not exist."""
        values = {
            "name": display_name(definition.name)[:200],
            "config": _config(definition),
            "updated_at": datetime.now(UTC),
        }
        async with self._sessions.begin() as s:
            result: Any = await s.execute(
                update(Agent)
                .where(Agent.tenant_id == tenant_id, Agent.id == agent_id)
                .where(Agent.deleted_at.is_(None))
                .values(**values)
            )
        if not result.rowcount:
            return None
        return await self.get(tenant_id, agent_id)

    async def delete(self, tenant_id: str, agent_id: str) -> bool:
        """Soft-delete; False when there was no live agent."""
        async with self._sessions.begin() as s:
            result: Any = await s.execute(
                update(Agent)
                .where(Agent.tenant_id == tenant_id, Agent.id == agent_id)
                .where(Agent.deleted_at.is_(None))
                .values(deleted_at=datetime.now(UTC))
            )
        return bool(result.rowcount)


def _live(tenant_id: str) -> Any:
    return select(Agent).where(Agent.tenant_id == tenant_id, Agent.deleted_at.is_(None))


def _config(definition: AgentDefinition) -> dict[str, Any]:
    # Only what the creator set is stored, so later default changes apply on read.
    stored = definition.model_dump(mode="json", exclude_unset=True, exclude={"hidden"})
    stored["name"] = definition.name  # the localized form, if any
    return stored
