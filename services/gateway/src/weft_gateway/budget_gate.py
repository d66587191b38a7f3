"""BudgetGate: a tenant over its token budget gets no new turn (429 with the reason).

The counters are the engine's (``weft_platform.budgets``): it adds each model response's
tokens to the tenant's minute and day windows. The gateway only reads them, before it
publishes a turn; what a running turn may still spend is the engine's check, against the
limits read here, which the turn carries (``ChatRequested.data.budget``: the engine reads
no database).
"""

from __future__ import annotations

import time

import structlog
from fastapi import HTTPException
from redis.exceptions import RedisError
from weft_platform.budgets import BudgetLimits, TenantBudgetPolicy, TokenBudgets
from weft_platform.metrics import budget_rejected

log = structlog.get_logger(__name__)


class BudgetGate:
    """Admission of turns against the tenant's token budgets."""

    def __init__(self, budgets: TokenBudgets, policy: TenantBudgetPolicy):
        self._budgets = budgets
        self._policy = policy

    async def admit(self, tenant_id: str) -> BudgetLimits:
        """The tenant's limits, for the turn to carry; 429 with a JSON reason (which
        budget, its limit, when it resets) and ``Retry-After`` when the tenant is at or
        over a budget."""
        limits = await self._policy.limits(tenant_id)
        now = time.time()
        try:
            exceeded = await self._budgets.exceeded(tenant_id, limits, now)
        except RedisError as exc:
            # The same Redis holds the turn slots and streams: a turn could not run
            # anyway. Say so rather than admit a turn past a budget nobody can read.
            log.warning("budget_read_failed", tenant_id=tenant_id, error=repr(exc))
            raise HTTPException(503, "budget store unavailable", {"Retry-After": "2"}) from exc
        if exceeded is None:
            return limits
        budget_rejected(exceeded.budget, tenant_id)
        retry = exceeded.retry_after_s(now)
        raise HTTPException(429, exceeded.reason(now), {"Retry-After": str(retry)})
