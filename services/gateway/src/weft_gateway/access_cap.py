"""The tenant's maximum access level (SPEC H-01), applied to each turn's agent.

An operator sets ``max_access_level`` in the tenant's settings (admin API); every agent of
the tenant then runs at most at that level: the gateway lowers
``agent.approval.access_level`` with :func:`weft_contracts.cap_access` before it publishes
``ChatRequested``, so the engine's policy never sees a higher one. The setting is read at
most every ``cache_s`` per gateway (a change takes effect within that time); a database
that cannot be read refuses the turn (503) rather than run it uncapped.
"""

from __future__ import annotations

import time

from fastapi import HTTPException
from pydantic import ValidationError
from sqlalchemy import select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from weft_contracts import AccessLevel, AgentConfig, cap_access
from weft_contracts.approvals import ACCESS_ORDER
from weft_storage.gateway.models_admin import Tenant

from weft_gateway.tenant_registry import TenantSettings


class AccessCap:
    """Reads and caches each tenant's ``max_access_level``."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession], *, cache_s: float = 30.0):
        self._sessions = sessions
        self._cache_s = cache_s
        self._cache: dict[str, tuple[float, AccessLevel | None]] = {}

    async def maximum(self, tenant_id: str) -> AccessLevel | None:
        """The tenant's cap; None: no cap (or no tenant row)."""
        now = time.monotonic()
        cached = self._cache.get(tenant_id)
        if cached is not None and cached[0] > now:
            return cached[1]
        try:
            async with self._sessions() as s:
                raw = await s.scalar(select(Tenant.settings).where(Tenant.id == tenant_id))
        except (SQLAlchemyError, OSError) as exc:
            busy = HTTPException(503, "tenant settings unavailable; retry", {"Retry-After": "1"})
            raise busy from exc
        level = _level(raw)
        if len(self._cache) >= 10_000:
            self._cache.clear()  # bounded; a tenant's row is cheap to read again
        self._cache[tenant_id] = (now + self._cache_s, level)
        return level

    async def apply(self, tenant_id: str, agent: AgentConfig) -> AgentConfig:
        """``agent`` with its access level capped by the tenant's maximum."""
        return capped(agent, await self.maximum(tenant_id))


def capped(agent: AgentConfig, maximum: AccessLevel | None) -> AgentConfig:
    """``agent`` with ``approval.access_level`` lowered to ``maximum`` (unchanged: itself)."""
    level = cap_access(agent.approval.access_level, maximum)
    if level == agent.approval.access_level:
        return agent
    approval = agent.approval.model_copy(update={"access_level": level})
    return agent.model_copy(update={"approval": approval})


def _level(raw: object) -> AccessLevel | None:
    if not isinstance(raw, dict):
        return None
    try:
        return TenantSettings.model_validate(raw).max_access_level
    except ValidationError:
        # Settings written by hand that no longer validate: the cap alone is read, and
        # a value that is not a level caps at the lowest (fail closed).
        value = raw.get("max_access_level")
        if value is None:
            return None
        return next((level for level in ACCESS_ORDER if level == value), "read_only")
