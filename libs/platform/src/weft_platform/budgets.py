"""Per-tenant token budgets, counted in Redis so every engine and gateway replica sees
the same totals (ARCHITECTURE invariant 6).

Two fixed windows per tenant: the UTC minute and the UTC day. The engine adds each model
response's tokens (prompt + completion, as the provider counted them) to both windows'
counters with :meth:`TokenBudgets.spend`; the gateway refuses a new turn while either
counter is at or above its limit (:meth:`TokenBudgets.exceeded`), and the engine does not
start another model call of a running turn then. A window's counter expires a little after
the window ends, so its key never outlives its use.

Limits: settings give the defaults, a tenant's row in ``tenant_budgets`` overrides them
(:class:`BudgetLimits`; 0 = unlimited), read through a short cache by
:class:`TenantBudgetPolicy`.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

from pydantic import Field
from redis.asyncio import Redis

from weft_platform.settings import ServiceSettings

BudgetName = Literal["tokens_per_minute", "tokens_per_day"]
MINUTE_S = 60
DAY_S = 86_400
_WINDOWS: tuple[tuple[BudgetName, str, int], ...] = (
    ("tokens_per_minute", "m", MINUTE_S),
    ("tokens_per_day", "d", DAY_S),
)


@dataclass(frozen=True)
class BudgetLimits:
    """A tenant's token budgets; 0 means unlimited."""

    tokens_per_minute: int = 0
    tokens_per_day: int = 0

    def limit(self, name: BudgetName) -> int:
        """The limit of one budget."""
        return self.tokens_per_minute if name == "tokens_per_minute" else self.tokens_per_day


@dataclass(frozen=True, kw_only=True)
class BudgetExceeded:
    """Which budget a tenant is over, and when it resets."""

    budget: BudgetName
    limit: int
    used: int
    resets_at: float
    """Epoch seconds of the window's end."""

    def retry_after_s(self, now: float) -> int:
        """Whole seconds until the window ends (at least 1), for ``Retry-After``."""
        return max(1, int(self.resets_at - now + 0.999))

    def reason(self, now: float) -> dict[str, object]:
        """The JSON reason of a refusal (the gateway's 429 body ``detail``)."""
        return {
            "code": "budget_exceeded",
            "budget": self.budget,
            "limit": self.limit,
            "used": self.used,
            "resets_at": datetime.fromtimestamp(self.resets_at, UTC).isoformat(),
            "retry_after_s": self.retry_after_s(now),
            "message": f"this tenant used {self.used} of its {self.limit} "
            f"{self.budget.replace('_', ' ')}; it resets at the end of the window",
        }


def budget_key(tenant_id: str, window: str, index: int) -> str:
    """Redis counter of one tenant's window (``m``: minute, ``d``: day) number ``index``."""
    return f"weft:budget:{tenant_id}:{window}:{index}"


class TokenBudgets:
    """The counters; windows are numbered by ``epoch_seconds // length``."""

    def __init__(self, redis: Redis):
        self._redis = redis

    async def spend(self, tenant_id: str, tokens: int, now: float | None = None) -> None:
        """Add ``tokens`` to the tenant's current minute and day."""
        if tokens <= 0:
            return
        now = time.time() if now is None else now
        async with self._redis.pipeline(transaction=True) as pipe:
            for _, window, length in _WINDOWS:
                index = int(now // length)
                key = budget_key(tenant_id, window, index)
                pipe.incrby(key, tokens)
                pipe.expireat(key, (index + 1) * length + MINUTE_S)
            await pipe.execute()

    async def used(self, tenant_id: str, now: float | None = None) -> dict[BudgetName, int]:
        """Tokens counted in the tenant's current minute and day."""
        now = time.time() if now is None else now
        keys = [budget_key(tenant_id, w, int(now // n)) for _, w, n in _WINDOWS]
        values = await self._redis.mget(keys)
        return {name: int(v or 0) for (name, _, _), v in zip(_WINDOWS, values, strict=True)}

    async def exceeded(
        self, tenant_id: str, limits: BudgetLimits, now: float | None = None
    ) -> BudgetExceeded | None:
        """The first budget the tenant is at or over (the day's first: it resets later),
        or None."""
        if not limits.tokens_per_minute and not limits.tokens_per_day:
            return None
        now = time.time() if now is None else now
        used = await self.used(tenant_id, now)
        for name, _, length in reversed(_WINDOWS):
            limit = limits.limit(name)
            if limit and used[name] >= limit:
                resets = (int(now // length) + 1) * length
                return BudgetExceeded(budget=name, limit=limit, used=used[name], resets_at=resets)
        return None


Override = Callable[[str], Awaitable[tuple[int | None, int | None]]]
"""A tenant's own (per minute, per day) budgets; None keeps the default."""


class TenantBudgetPolicy:
    """Each tenant's limits: the defaults, overridden by its stored row, cached
    ``cache_s`` (a change takes effect within that)."""

    def __init__(self, defaults: BudgetLimits, override: Override | None, *, cache_s: float = 30):
        self._defaults = defaults
        self._override = override
        self._cache_s = cache_s
        self._cache: dict[str, tuple[float, BudgetLimits]] = {}

    async def limits(self, tenant_id: str) -> BudgetLimits:
        """The tenant's limits now."""
        if self._override is None:
            return self._defaults
        now = time.monotonic()
        cached = self._cache.get(tenant_id)
        if cached is not None and cached[0] > now:
            return cached[1]
        per_minute, per_day = await self._override(tenant_id)
        limits = BudgetLimits(
            tokens_per_minute=self._defaults.tokens_per_minute
            if per_minute is None
            else per_minute,
            tokens_per_day=self._defaults.tokens_per_day if per_day is None else per_day,
        )
        if len(self._cache) >= 10_000:
            self._cache.clear()  # bounded; a reload is one primary-key read
        self._cache[tenant_id] = (now + self._cache_s, limits)
        return limits


class TokenBudgetSettings(ServiceSettings):
    """Budget defaults, shared by the gateway (admission) and the engine (running turns)
    so both read the same variables."""

    token_budget_per_minute: int = Field(
        default=0, ge=0, description="LLM tokens (in + out) per tenant per minute; 0: unlimited."
    )
    token_budget_per_day: int = Field(
        default=0, ge=0, description="LLM tokens (in + out) per tenant per UTC day; 0: unlimited."
    )
    budget_cache_s: float = Field(
        default=30.0, ge=0, description="A tenant's budget row is re-read after this long."
    )

    def budget_defaults(self) -> BudgetLimits:
        """The defaults as limits."""
        return BudgetLimits(self.token_budget_per_minute, self.token_budget_per_day)
