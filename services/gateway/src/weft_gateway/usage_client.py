"""The admin API's usage reports, asked of memory, which owns the ``usage`` table
(``GET /internal/usage``, a system route: the gateway presents its own service credential
with the one scope ``memory:usage.read``, never a tenant's request credential)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from pydantic import BaseModel
from weft_contracts.usage import UsageGroup, UsageTotals
from weft_platform.internal_auth import bearer

from weft_gateway.clients import ServiceClient

USAGE_SCOPE = "memory:usage.read"


class _Report(BaseModel):
    totals: list[UsageTotals]


class UsageReader:
    """Reads a tenant's usage from memory."""

    def __init__(self, memory: ServiceClient, credential: Callable[[], str]):
        self._memory = memory
        self._credential = credential

    async def totals(
        self, tenant_id: str, start: datetime, end: datetime, group_by: UsageGroup
    ) -> list[UsageTotals]:
        """Usage of ``tenant_id`` in ``[start, end)``, one entry per user or agent; a
        failure of memory is the client's 503 with ``Retry-After``."""
        params = {
            "tenant_id": tenant_id, "from": start.isoformat(), "to": end.isoformat(),
            "group_by": group_by,
        }  # fmt: skip
        answer = await self._memory.call(
            "GET", "/internal/usage", params=params, headers=bearer(self._credential())
        )
        return _Report.model_validate(answer).totals

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._memory.aclose()
