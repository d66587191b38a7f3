"""The lease heartbeat keeps renewing the leases of the steps running here through a
failure of one renewal: a replica whose Redis blinked (or that waits out a broker
outage) is not taken for a dead one by the other replicas' reapers (invariant 2)."""

from __future__ import annotations

import asyncio
from typing import cast

from weft_engine.leases import TurnLeases
from weft_engine.scheduler import StepScheduler, StepStart


class _Leases:
    """Renewals counted; the first one fails as a Redis error would."""

    def __init__(self) -> None:
        self.renewals = 0

    async def claim(self, request_id: str) -> bool:
        self.renewals += 1
        if self.renewals == 1:
            raise ConnectionError("redis blinked")
        return True

    async def expired(self) -> list[str]:
        return []

    async def due(self) -> list[str]:
        return []


async def test_a_failed_renewal_does_not_stop_the_heartbeat() -> None:
    leases = _Leases()

    async def never_runs(_: StepStart) -> None:
        raise AssertionError("no step is submitted here")

    scheduler = StepScheduler(cast(TurnLeases, leases), never_runs, max_inflight=1, ttl_s=0.03)

    async def running_step() -> None:
        await asyncio.Event().wait()

    step = asyncio.create_task(running_step())  # a step running on this replica
    scheduler._tasks["req-1"] = step
    scheduler.start()
    try:
        for _ in range(200):
            if leases.renewals >= 3:
                break
            await asyncio.sleep(0.01)
        assert leases.renewals >= 3, "the heartbeat died with its first failed renewal"
    finally:
        scheduler._tasks.clear()
        step.cancel()
        await scheduler.stop(0)
