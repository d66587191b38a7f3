"""A tenant's share of one engine replica's step slots (StepScheduler, docs/fairness.md),
on real ``TurnLeases`` over an in-memory Redis with Lua: a step over its tenant's share is
deferred (not waited for in the Kafka handler) and due in Redis, starts here once one of
its tenant's steps ends, and leaves the replica's last slot to another tenant."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

import pytest
from fakeredis import FakeAsyncRedis
from weft_contracts import AgentConfig
from weft_engine.leases import TurnLeases
from weft_engine.scheduler import StepScheduler, StepStart, local_share
from weft_engine.state import TurnState

TTL_S = 6.0


@dataclass
class _Steps:
    """Steps that run until the test lets them end."""

    started: list[str] = field(default_factory=list)
    gates: dict[str, asyncio.Event] = field(default_factory=dict)

    async def run(self, start: StepStart) -> None:
        self.started.append(start.request_id)
        await self.gates.setdefault(start.request_id, asyncio.Event()).wait()

    def end(self, request_id: str) -> None:
        self.gates.setdefault(request_id, asyncio.Event()).set()


@pytest.fixture
async def redis() -> AsyncIterator[FakeAsyncRedis]:
    client = FakeAsyncRedis()
    yield client
    await client.aclose()


def _scheduler(
    redis: FakeAsyncRedis,
    steps: _Steps,
    share: int | None,
    *,
    owner: str = "replica-1",
    load: Callable[[str], Awaitable[TurnState | None]] | None = None,
) -> StepScheduler:
    leases = TurnLeases(redis, owner=owner, namespace="t.", ttl_s=TTL_S)
    return StepScheduler(
        leases, steps.run, max_inflight=2, ttl_s=TTL_S, tenant_max_local=share, load=load
    )


def _state(request_id: str, tenant_id: str) -> TurnState:
    return TurnState(
        tenant_id=tenant_id, session_id=f"s-{request_id}", request_id=request_id, user_id="u",
        agent=AgentConfig(agent_id="a", model="m"), messages=[], started_at=time.time(),
        phase="think",
    )  # fmt: skip


async def _until(check: Callable[[], bool], timeout_s: float = 2.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.01)


async def test_a_step_over_its_tenants_share_is_deferred_and_due_not_waited_for(
    redis: FakeAsyncRedis,
) -> None:
    steps = _Steps()
    scheduler = _scheduler(redis, steps, share=1)
    assert await scheduler.submit("b1", tenant_id="B")
    # B's second step: the handler gets control back at once, the step is due in Redis.
    assert not await asyncio.wait_for(scheduler.submit("b2", tenant_id="B"), 1)
    due_at = await redis.zscore("weft:t.deadlines", "b2")
    assert due_at is not None and due_at / 1000 > time.time() + TTL_S / 2
    # The reaper finding it due while B still holds its share defers it again.
    assert not await scheduler.submit("b2")
    assert await scheduler.submit("c1", tenant_id="C")  # the slot B left
    await _until(lambda: steps.started == ["b1", "c1"])
    # One of B's steps ends here: its deferred step starts in the freed share.
    steps.end("b1")
    await _until(lambda: steps.started == ["b1", "c1", "b2"])
    assert scheduler.running("b2") and not scheduler.running("b1")
    assert await redis.zscore("weft:t.deadlines", "b2") is None  # the claim dropped it
    for rid in ("b2", "c1"):
        steps.end(rid)
    await scheduler.stop(1)


async def test_a_reaper_counts_a_due_turn_against_its_tenants_share_by_its_state(
    redis: FakeAsyncRedis,
) -> None:
    """A turn another replica deferred, found due here, is counted as its tenant's: read
    from its state, handed to the step (no second load)."""
    states = {"b1": _state("b1", "B"), "b2": _state("b2", "B")}
    loaded: list[str] = []

    async def load(request_id: str) -> TurnState | None:
        loaded.append(request_id)
        return states.get(request_id)

    steps = _Steps()
    scheduler = _scheduler(redis, steps, share=1, owner="replica-2", load=load)
    assert await scheduler.submit("b1", tenant_id="B")
    await redis.zadd("weft:t.deadlines", {"b2": 0})  # due: deferred by another replica
    scheduler.start()
    await _until(lambda: "b2" in loaded)
    await _until(lambda: bool(scheduler._deferred))
    assert steps.started == ["b1"] and "b2" in scheduler._deferred  # over B's share here
    steps.end("b1")
    await _until(lambda: steps.started == ["b1", "b2"])
    steps.end("b2")
    await scheduler.stop(1)


@pytest.mark.parametrize("share", [1, None], ids=["share", "no-local-share"])
async def test_a_flooder_leaves_a_step_slot_of_the_replica_to_another_tenant(
    redis: FakeAsyncRedis, share: int | None
) -> None:
    """With no share per replica B's two steps fill both slots, and C's submission (the
    Kafka handler that reads it) waits for one of them to end."""
    steps = _Steps()
    scheduler = _scheduler(redis, steps, share=share)
    await scheduler.submit("b1", tenant_id="B")
    b2 = asyncio.create_task(scheduler.submit("b2", tenant_id="B"))
    await asyncio.sleep(0.05)
    c1 = asyncio.create_task(scheduler.submit("c1", tenant_id="C"))
    done, _ = await asyncio.wait([c1], timeout=1)
    if share is None:
        assert not done and steps.started == ["b1", "b2"]  # C starves behind B
        steps.end("b1")
        await c1
    else:
        assert done and steps.started == ["b1", "c1"]
    for rid in ("b1", "b2", "c1"):
        steps.end(rid)
    await b2
    await _until(lambda: "b2" in steps.started)
    steps.end("b2")
    await scheduler.stop(1)


def test_the_default_share_is_all_but_one_slot_and_zero_lifts_it() -> None:
    assert local_share(64, None) == 63
    assert local_share(1, None) == 1
    assert local_share(8, 3) == 3
    assert local_share(8, 0) is None
