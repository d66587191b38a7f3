"""``GET /internal/usage``: a tenant's metered usage per user or per agent over a period
(``weft_storage.usage.usage_totals``), for the operator's admin API.

A system route: it names any tenant, so it wants a service credential with the
``memory:usage.read`` scope (the gateway's admin API, or an operator), never a tenant's
request credential.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated

from fastapi import APIRouter, HTTPException, Query
from pydantic import AwareDatetime, BaseModel
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from weft_platform.internal_auth import SystemRoute
from weft_storage.memory.usage import UsageGroup, UsageTotals, usage_totals

USAGE_ROUTE = "/internal/usage"
USAGE_SCOPE = SystemRoute("memory:usage.read", frozenset({"gateway", "operator"}))
MAX_PERIOD = timedelta(days=366)


class UsageReport(BaseModel):
    """Usage of one tenant in ``[from, to)``, one entry per user or agent."""

    tenant_id: str
    group_by: UsageGroup
    totals: list[UsageTotals]


def usage_router(sessions: async_sessionmaker[AsyncSession]) -> APIRouter:
    """The usage route."""
    router = APIRouter(tags=["internal"])

    @router.get(USAGE_ROUTE, response_model=UsageReport)
    async def usage(
        tenant_id: Annotated[str, Query(min_length=1, max_length=128)],
        start: Annotated[AwareDatetime, Query(alias="from")],
        end: Annotated[AwareDatetime, Query(alias="to")],
        group_by: UsageGroup = "user",
    ) -> UsageReport:
        """Sums of tokens in/out, model calls, tool calls and ingested bytes."""
        if end <= start or end - start > MAX_PERIOD:
            raise HTTPException(422, "`to` must be after `from`, at most 366 days later")
        totals = await usage_totals(sessions, tenant_id, start, end, group_by)
        return UsageReport(tenant_id=tenant_id, group_by=group_by, totals=totals)

    return router
