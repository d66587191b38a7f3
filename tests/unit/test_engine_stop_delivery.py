"""A user's stop reaches the running step even when a library swallowed the cancel
(SPEC E-20's "cancel" row): on Python 3.11, ``asyncio.wait_for`` (redis-py awaits it for
every command it sends) returns its result when a cancel lands as that result arrives,
and the step runs on with ``task.cancelling()`` above 0. A CI run under load streamed a
whole answer after the user's stop that way. ``StepScheduler.cancel`` delivers the stop
again until the step takes it (``TurnLoop`` uncancels itself when it does)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest
from fakeredis import FakeAsyncRedis
from weft_engine.leases import TurnLeases
from weft_engine.scheduler import STOP_REDELIVERY_S, StepScheduler, StepStart

TTL_S = 6.0


@pytest.fixture
async def redis() -> AsyncIterator[FakeAsyncRedis]:
    client = FakeAsyncRedis()
    yield client
    await client.aclose()


def test_the_swallowing_this_guards_against_is_real_on_this_python() -> None:
    """If a later Python stops swallowing, the redelivery is harmless but no longer needed."""

    async def main() -> list[object]:
        fut = asyncio.get_running_loop().create_future()
        seen: list[object] = []

        async def step() -> None:
            seen.append(await asyncio.wait_for(fut, 10))
            seen.append(asyncio.current_task().cancelling())  # type: ignore[union-attr]

        task = asyncio.create_task(step())
        await asyncio.sleep(0)
        fut.set_result("result")
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return seen

    assert asyncio.run(main()) == ["result", 1], "the cancel was swallowed, still counted"


class SwallowingStep:
    """A step whose first await swallows a cancel as ``wait_for`` does, then streams on;
    like ``TurnLoop``, it takes a stop by uncancelling itself, then ends."""

    def __init__(self) -> None:
        self.first_await = asyncio.Event()
        self.release = asyncio.get_running_loop().create_future()
        self.outcome = ""

    async def run(self, start: StepStart) -> None:
        try:
            self.first_await.set()
            await asyncio.wait_for(self.release, 10)  # the cancel is lost here
            for _ in range(200):  # the rest of the answer: 10 s
                await asyncio.sleep(0.05)
            self.outcome = "completed"
        except asyncio.CancelledError:
            task = asyncio.current_task()
            while task is not None and task.uncancel() > 0:
                pass
            self.outcome = "stopped"


async def test_a_stop_swallowed_by_wait_for_is_delivered_again(redis: FakeAsyncRedis) -> None:
    step = SwallowingStep()
    leases = TurnLeases(redis, owner="replica-1", namespace="t.", ttl_s=TTL_S)
    scheduler = StepScheduler(leases, step.run, max_inflight=2, ttl_s=TTL_S)
    assert await scheduler.submit("r1")
    await asyncio.wait_for(step.first_await.wait(), 5)
    step.release.set_result(None)
    assert scheduler.cancel("r1")  # lands as wait_for's result arrives: swallowed
    started = time.monotonic()
    while scheduler.running("r1"):
        assert time.monotonic() - started < 5, "the step ran on after the stop"
        await asyncio.sleep(0.01)
    assert step.outcome == "stopped"
    assert time.monotonic() - started < 10 * STOP_REDELIVERY_S + 2


async def test_a_stop_the_step_took_is_not_delivered_again(redis: FakeAsyncRedis) -> None:
    """Once the step uncancelled itself, it finishes the stop undisturbed."""
    finished: list[str] = []
    inside = asyncio.Event()

    async def step(start: StepStart) -> None:
        try:
            inside.set()
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            while task is not None and task.uncancel() > 0:
                pass
            await asyncio.sleep(4 * STOP_REDELIVERY_S)  # the stop's own work (Finisher)
            finished.append(start.request_id)

    leases = TurnLeases(redis, owner="replica-1", namespace="t.", ttl_s=TTL_S)
    scheduler = StepScheduler(leases, step, max_inflight=2, ttl_s=TTL_S)
    assert await scheduler.submit("r2")
    await asyncio.wait_for(inside.wait(), 5)
    assert scheduler.cancel("r2")
    started = time.monotonic()
    while scheduler.running("r2"):
        assert time.monotonic() - started < 5
        await asyncio.sleep(0.01)
    assert finished == ["r2"]
