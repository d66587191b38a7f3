"""What an upload tells knowledge about the work that follows it (SPEC T-18, T-10):
the session its wiki and graph progress notices go to, and the tenant's token budgets.

The session is the caller's own, checked here by the session directory (404 for a
session of another user or tenant, as every session route answers), so a key cannot
write progress into a stream it does not own. The budgets are the tenant's limits as the
gateway admits turns under them (defaults overridden by its ``tenant_budgets`` row): the
budget comes with the upload as it comes with a turn, and knowledge, which never reads
the gateway's table, pauses wiki generation and graph extraction on them.
"""

from __future__ import annotations

from typing import Any

from weft_platform.budgets import TenantBudgetPolicy

from weft_gateway.auth import Principal
from weft_gateway.session_cache import SessionDirectory


class UploadOrigins:
    """Builds the origin fields of an upload sent to knowledge."""

    def __init__(self, directory: SessionDirectory, budgets: TenantBudgetPolicy):
        self._directory = directory
        self._budgets = budgets

    async def fields(self, who: Principal, session_id: str | None) -> dict[str, Any]:
        """``session_id`` (when given, after the owner check) and the tenant's limits."""
        out: dict[str, Any] = {}
        if session_id is not None:
            await self._directory.lookup(who.tenant_id, session_id, user_id=who.user_id)
            out["session_id"] = session_id
        limits = await self._budgets.limits(who.tenant_id)
        out["budget_tokens_per_minute"] = limits.tokens_per_minute
        out["budget_tokens_per_day"] = limits.tokens_per_day
        return out
