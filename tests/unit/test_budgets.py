"""Token budget counters and their windows, the per-tenant limits, and the SSE slot
leases: on an in-memory Redis (fakeredis, with its Lua), with explicit clocks."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from fakeredis import FakeAsyncRedis
from fastapi import HTTPException
from weft_gateway.sse_slots import StreamSlots, slots_key
from weft_platform.budgets import BudgetLimits, TenantBudgetPolicy, TokenBudgets

MINUTE_START = 1_800_000_000.0 - 1_800_000_000.0 % 86_400 + 3600  # 01:00 UTC of some day


@pytest.fixture
async def redis() -> AsyncIterator[FakeAsyncRedis]:
    r = FakeAsyncRedis()
    yield r
    await r.aclose()


async def test_spend_counts_in_the_minute_and_the_day(redis: FakeAsyncRedis) -> None:
    budgets = TokenBudgets(redis)
    await budgets.spend("a", 70, now=MINUTE_START + 5)
    await budgets.spend("a", 40, now=MINUTE_START + 50)
    await budgets.spend("b", 999, now=MINUTE_START + 50)
    used = await budgets.used("a", now=MINUTE_START + 59)
    assert used == {"tokens_per_minute": 110, "tokens_per_day": 110}


async def test_the_minute_resets_and_the_day_does_not(redis: FakeAsyncRedis) -> None:
    budgets = TokenBudgets(redis)
    limits = BudgetLimits(tokens_per_minute=100, tokens_per_day=1000)
    await budgets.spend("a", 120, now=MINUTE_START + 10)
    over = await budgets.exceeded("a", limits, now=MINUTE_START + 20)
    assert over is not None and over.budget == "tokens_per_minute"
    assert (over.limit, over.used, over.resets_at) == (100, 120, MINUTE_START + 60)
    assert over.retry_after_s(MINUTE_START + 20) == 40
    assert await budgets.exceeded("a", limits, now=MINUTE_START + 60) is None
    assert (await budgets.used("a", now=MINUTE_START + 60))["tokens_per_day"] == 120


async def test_the_day_budget_wins_and_resets_at_midnight_utc(redis: FakeAsyncRedis) -> None:
    budgets = TokenBudgets(redis)
    limits = BudgetLimits(tokens_per_minute=100, tokens_per_day=150)
    await budgets.spend("a", 90, now=MINUTE_START)
    await budgets.spend("a", 110, now=MINUTE_START + 60)
    over = await budgets.exceeded("a", limits, now=MINUTE_START + 61)
    assert over is not None and over.budget == "tokens_per_day"
    midnight = MINUTE_START - 3600 + 86_400
    assert over.resets_at == midnight
    assert over.reason(MINUTE_START + 61)["retry_after_s"] == midnight - MINUTE_START - 61
    assert await budgets.exceeded("a", limits, now=midnight) is None


async def test_keys_expire_after_their_window(redis: FakeAsyncRedis) -> None:
    budgets = TokenBudgets(redis)
    await budgets.spend("a", 5, now=MINUTE_START)
    ttls = [await redis.ttl(k) for k in await redis.keys("weft:budget:a:*")]
    assert len(ttls) == 2 and all(t > 0 for t in ttls)


async def test_zero_means_unlimited(redis: FakeAsyncRedis) -> None:
    budgets = TokenBudgets(redis)
    await budgets.spend("a", 10**9, now=MINUTE_START)
    assert await budgets.exceeded("a", BudgetLimits(), now=MINUTE_START) is None


async def test_a_tenant_row_overrides_the_defaults_and_is_cached() -> None:
    reads: list[str] = []

    async def override(tenant_id: str) -> tuple[int | None, int | None]:
        reads.append(tenant_id)
        return (0, None) if tenant_id == "big" else (None, None)

    policy = TenantBudgetPolicy(BudgetLimits(100, 1000), override, cache_s=60)
    assert await policy.limits("big") == BudgetLimits(0, 1000)
    assert await policy.limits("small") == BudgetLimits(100, 1000)
    assert await policy.limits("big") == BudgetLimits(0, 1000)
    assert reads == ["big", "small"]


async def test_stream_slots_cap_a_tenant_and_free_on_release(redis: FakeAsyncRedis) -> None:
    slots = StreamSlots(redis, max_per_tenant=2, lease_s=30)
    first = await slots.acquire("a")
    await slots.acquire("a")
    with pytest.raises(HTTPException) as refused:
        await slots.acquire("a")
    assert refused.value.status_code == 429
    assert isinstance(refused.value.detail, dict)
    assert refused.value.detail["code"] == "too_many_streams"
    assert refused.value.headers is not None and "Retry-After" in refused.value.headers
    assert await slots.acquire("b") is not None  # another tenant is not counted
    await slots.release(first)
    assert await slots.acquire("a") is not None
    await slots.aclose()
    assert await redis.zcard(slots_key("a")) == 0


async def test_an_expired_lease_frees_its_slot(redis: FakeAsyncRedis) -> None:
    """A killed gateway renews nothing: its leases expire and the slots come back."""
    dead = StreamSlots(redis, max_per_tenant=1, lease_s=30)
    slot = await dead.acquire("a")
    assert slot is not None
    await redis.zadd(slots_key("a"), {slot.connection_id: 1.0})  # its lease ran out long ago
    alive = StreamSlots(redis, max_per_tenant=1, lease_s=30)
    assert await alive.acquire("a") is not None
    await alive.aclose()


async def test_no_cap_takes_no_slot(redis: FakeAsyncRedis) -> None:
    slots = StreamSlots(redis, max_per_tenant=0, lease_s=30)
    assert await slots.acquire("a") is None
    assert await redis.exists(slots_key("a")) == 0


async def test_renewal_extends_open_leases_only(redis: FakeAsyncRedis) -> None:
    slots = StreamSlots(redis, max_per_tenant=5, lease_s=30)
    kept = await slots.acquire("a")
    gone = await slots.acquire("a")
    assert kept is not None and gone is not None
    key = slots_key("a")
    for slot in (kept, gone):
        await redis.zadd(key, {slot.connection_id: 5.0})  # about to expire
    await slots.release(gone)
    await slots._renew()
    assert (await redis.zscore(key, kept.connection_id) or 0) > 5.0
    assert await redis.zscore(key, gone.connection_id) is None
    await slots.aclose()
