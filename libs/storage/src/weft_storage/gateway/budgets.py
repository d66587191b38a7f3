"""A tenant's own token budgets (``tenant_budgets``)."""

from __future__ import annotations

from sqlalchemy import func
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from weft_storage.gateway.models_budgets import TenantBudget

TURN = "turn"
DOCUMENT = "document"


async def budget_override(
    sessions: async_sessionmaker[AsyncSession], tenant_id: str
) -> tuple[int | None, int | None]:
    """The tenant's own (per minute, per day) token budgets; None keeps the default."""
    async with sessions() as s:
        row = await s.get(TenantBudget, tenant_id)
    if row is None:
        return None, None
    return row.tokens_per_minute, row.tokens_per_day


async def set_budget_override(
    sessions: async_sessionmaker[AsyncSession],
    tenant_id: str,
    *,
    tokens_per_minute: int | None,
    tokens_per_day: int | None,
) -> None:
    """Set a tenant's budgets (None: the default; 0: unlimited)."""
    values = {
        "tokens_per_minute": tokens_per_minute,
        "tokens_per_day": tokens_per_day,
        "updated_at": func.now(),
    }
    stmt = insert(TenantBudget).values(tenant_id=tenant_id, **values)
    async with sessions.begin() as s:
        await s.execute(stmt.on_conflict_do_update(index_elements=["tenant_id"], set_=values))
