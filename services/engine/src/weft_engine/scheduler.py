"""StepScheduler: runs turn steps as tasks so one slow turn never blocks another.

Kafka handlers only record what arrived and submit the turn; the step (LLM stream, tool
dispatch) runs in its own task under a lease. At most ``max_inflight`` steps run per
replica: beyond that ``submit`` waits, so the consumer stops fetching and requests wait
in Kafka, not in memory (invariant 6). A reaper claims turns whose replica died and turns
whose tool deadline passed (invariants 2 and 4).

A submitter that has just written the turn's state hands it over with the submission: the
step starts from it when the lease claim reads the same version, instead of loading it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import structlog
from weft_platform.tasks import cancel_and_wait

from weft_engine.leases import StepClaim, TurnLeases
from weft_engine.state import StaleTurnState, TurnState

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class StepStart:
    """What a step begins with."""

    request_id: str
    takeover: bool
    """The turn's previous replica stopped renewing its lease (invariant 2)."""
    claim: StepClaim
    state: TurnState | None = None
    """The state the submitter holds, when it has one; current if its version is the
    claim's."""

    def known_state(self) -> TurnState | None:
        """The submitter's state if nobody wrote the turn since, else None (load it)."""
        if self.state is not None and self.state.version == self.claim.version:
            return self.state
        return None


RunStep = Callable[[StepStart], Awaitable[None]]


class StepScheduler:
    """Owns this replica's running steps and its background reaper."""

    def __init__(self, leases: TurnLeases, run_step: RunStep, *, max_inflight: int, ttl_s: float):
        self._leases = leases
        self._run_step = run_step
        self._slots = asyncio.Semaphore(max_inflight)
        self._ttl = ttl_s
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._background: list[asyncio.Task[None]] = []

    def running(self, request_id: str) -> bool:
        """Whether this replica runs a step of the turn now."""
        return request_id in self._tasks

    async def submit(
        self, request_id: str, *, takeover: bool = False, state: TurnState | None = None
    ) -> bool:
        """Run the turn's next step here unless another replica holds it; waits for a slot.
        ``state``: the turn's state as the caller just saved it."""
        if request_id in self._tasks:
            return False
        await self._slots.acquire()
        claim = await self._leases.claim_step(request_id)
        if claim is None:
            self._slots.release()
            return False
        start = StepStart(request_id, takeover, claim, state)
        task = asyncio.create_task(self._run(start), name=f"turn:{request_id}")
        self._tasks[request_id] = task
        return True

    def cancel(self, request_id: str) -> bool:
        """Interrupt the local step of the turn (user stop); True when there was one."""
        task = self._tasks.get(request_id)
        if task is None:
            return False
        task.cancel("user_stop")
        return True

    async def _run(self, start: StepStart) -> None:
        request_id = start.request_id
        try:
            await self._run_step(start)
        except asyncio.CancelledError:
            # Shutdown: leave the lease expired so another replica's reaper takes over now.
            log.info("step_handed_over", request_id=request_id)
            await asyncio.shield(self._leases.hand_over(request_id))
            raise
        except StaleTurnState:
            # Another replica advanced the turn (it took the lease over): it owns the turn.
            log.warning("step_superseded", request_id=request_id)
            await asyncio.shield(self._leases.release(request_id))
        except Exception:
            # Retried as a takeover by the next reaper round; after MAX_TAKEOVERS the turn
            # fails with its one complete (SPEC E-04) instead of waiting, with neither a
            # lease nor a tool deadline, until its state expires.
            log.exception("step_crashed", request_id=request_id)
            await asyncio.shield(self._leases.give_up(request_id))
        else:
            await asyncio.shield(self._leases.release(request_id))
        finally:
            self._tasks.pop(request_id, None)
            self._slots.release()

    def start(self) -> None:
        """Start the lease heartbeat and the reaper."""
        self._background = [
            asyncio.create_task(self._heartbeat(), name="lease-heartbeat"),
            asyncio.create_task(self._reap(), name="lease-reaper"),
        ]

    async def _heartbeat(self) -> None:
        while True:
            await asyncio.sleep(self._ttl / 3)
            for request_id in list(self._tasks):
                await self._leases.claim(request_id)

    async def _reap(self) -> None:
        while True:
            await asyncio.sleep(0.5)
            try:
                for request_id in await self._leases.expired():
                    log.warning("turn_taken_over", request_id=request_id)
                    await self.submit(request_id, takeover=True)
                for request_id in await self._leases.due():
                    await self.submit(request_id)
            except Exception:  # a Redis hiccup must not kill the reaper
                log.exception("reaper_failed")

    async def stop(self, grace_s: float) -> None:
        """Let running steps finish for ``grace_s``, then hand the rest back to other replicas."""
        await cancel_and_wait(self._background)
        pending = list(self._tasks.values())
        if pending:
            _, still = await asyncio.wait(pending, timeout=grace_s)
            await cancel_and_wait(still)
