"""The tenant's token budgets as wiki generation and graph extraction spend them (the
engine's Redis counters, docs/budgets.md): a document's work waits while its tenant is
over a budget, and its model calls count in the tenant's windows like a turn's.

The limits are the tenant's own, as the gateway admitted the upload under them (the
budget comes with the upload as it comes with a turn: ``documents.budget_tokens_*``,
written from the gateway's snapshot); a document queued without them (an older gateway,
a document written inside knowledge) gets the worker's ``WEFT_TOKEN_BUDGET_PER_*``.
knowledge never reads the gateway's ``tenant_budgets`` table.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from weft_platform.budgets import BudgetLimits, TokenBudgets
from weft_storage.knowledge.documents import DocumentOrigin, DocumentReader


@dataclass(frozen=True, kw_only=True)
class BudgetPause:
    """Why a tenant's document waits, and until when."""

    reason: str
    until: datetime


def limits_of(origin: DocumentOrigin | None, defaults: BudgetLimits) -> BudgetLimits:
    """The document's limits: what its upload carried, each missing one the default."""
    if origin is None:
        return defaults
    per_minute, per_day = origin.tokens_per_minute, origin.tokens_per_day
    return BudgetLimits(
        tokens_per_minute=defaults.tokens_per_minute if per_minute is None else per_minute,
        tokens_per_day=defaults.tokens_per_day if per_day is None else per_day,
    )


class TenantBudget:
    """Checks and spends the tenant's budgets for one document's work."""

    def __init__(self, budgets: TokenBudgets, defaults: BudgetLimits, origins: DocumentReader):
        self._budgets = budgets
        self._defaults = defaults
        self._origins = origins

    async def over(self, tenant_id: str, document_id: str) -> BudgetPause | None:
        """The pause when the tenant is at or over one of the document's limits."""
        origin = await self._origins.origin(tenant_id, document_id)
        exceeded = await self._budgets.exceeded(tenant_id, limits_of(origin, self._defaults))
        if exceeded is None:
            return None
        until = datetime.fromtimestamp(exceeded.resets_at, UTC)
        reason = (
            f"paused: the tenant used {exceeded.used} of its {exceeded.limit} "
            f"{exceeded.budget.replace('_', ' ')}; resumes at {until.isoformat()}"
        )
        return BudgetPause(reason=reason, until=until)

    async def spend(self, tenant_id: str, tokens: int) -> None:
        """Count ``tokens`` (in + out) in the tenant's windows."""
        await self._budgets.spend(tenant_id, tokens)
