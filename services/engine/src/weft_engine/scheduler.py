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

from weft_engine.leases import LeaseRequest, StepClaim, TurnLeases
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


@dataclass(frozen=True)
class _Again:
    """A submission that waits for the turn's running step to end."""

    state: TurnState | None
    takeover: bool


class StepScheduler:
    """Owns this replica's running steps and its background reaper."""

    def __init__(self, leases: TurnLeases, run_step: RunStep, *, max_inflight: int, ttl_s: float):
        self._leases = leases
        self._run_step = run_step
        self._slots = asyncio.Semaphore(max_inflight)
        self._ttl = ttl_s
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._again: dict[str, _Again] = {}
        """Turns submitted while their step ran here: submitted again once it ended."""
        self._resubmits: set[asyncio.Task[bool]] = set()
        self._background: list[asyncio.Task[None]] = []
        self._stopping = False

    def running(self, request_id: str) -> bool:
        """Whether this replica runs a step of the turn now."""
        return request_id in self._tasks

    async def submit(
        self, request_id: str, *, takeover: bool = False, state: TurnState | None = None
    ) -> bool:
        """Run the turn's next step here unless another replica holds it; waits for a slot.
        ``state``: the turn's state as the caller just saved it.

        When the turn's step runs here already, the turn is submitted again once that step
        ends: a tool result can arrive while the step that dispatched the call still waits
        for Kafka's acks, before it gives the turn back."""
        if request_id in self._tasks:
            self._queue_again(request_id, state, takeover)
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

    async def reserve(self, request_id: str) -> LeaseRequest | None:
        """Take a step slot for the turn now, without waiting, and say what claiming its
        lease takes (for a write that claims it alongside, ``TurnStore.save_claiming``);
        None when the turn's step runs here already or every slot is busy. The caller
        then either starts the step (:meth:`start_claimed`) or gives the slot back
        (:meth:`unreserve`)."""
        if request_id in self._tasks or self._slots.locked():
            return None
        await self._slots.acquire()  # free: returns without suspending
        return self._leases.lease_request(request_id)

    def start_claimed(self, request_id: str, claim: StepClaim, state: TurnState) -> bool:
        """Run the turn's step in the slot :meth:`reserve` took, under the lease the caller
        claimed; False (slot given back, the turn submitted again when that step ends)
        when a step of the turn started here meanwhile."""
        if request_id in self._tasks:
            self.unreserve()
            self._queue_again(request_id, state, takeover=False)
            return False
        start = StepStart(request_id, False, claim, state)
        self._tasks[request_id] = asyncio.create_task(self._run(start), name=f"turn:{request_id}")
        return True

    def unreserve(self) -> None:
        """Give back a slot :meth:`reserve` took."""
        self._slots.release()

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
            self._submit_again(request_id)

    def _queue_again(self, request_id: str, state: TurnState | None, takeover: bool) -> None:
        """Submit the turn again once its running step ends; a takeover stays one (the
        reaper can see a crashed step's lease given up before the step has left here, and
        a takeover is what counts the turn's attempts, SPEC E-04)."""
        queued = self._again.get(request_id)
        self._again[request_id] = _Again(
            state, takeover or (queued is not None and queued.takeover)
        )

    def _submit_again(self, request_id: str) -> None:
        if request_id not in self._again:
            return
        again = self._again.pop(request_id)
        log.debug("step_submitted_again", request_id=request_id, takeover=again.takeover)
        if self._stopping:
            return  # the turn's lease or deadline hands it to another replica
        resubmit = self.submit(request_id, takeover=again.takeover, state=again.state)
        task = asyncio.create_task(resubmit, name=f"again:{request_id}")
        self._resubmits.add(task)
        task.add_done_callback(self._resubmits.discard)

    def start(self) -> None:
        """Start the lease heartbeat and the reaper."""
        self._background = [
            asyncio.create_task(self._heartbeat(), name="lease-heartbeat"),
            asyncio.create_task(self._reap(), name="lease-reaper"),
        ]

    async def _heartbeat(self) -> None:
        # Leases live in Redis only: a step waiting out a broker outage (a publish inside
        # its window) keeps renewing them, so no other replica takes a live turn over.
        while True:
            await asyncio.sleep(self._ttl / 3)
            try:
                for request_id in list(self._tasks):
                    await self._leases.claim(request_id)
            except Exception:  # a Redis hiccup must not stop the renewals for good
                log.exception("lease_heartbeat_failed")

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
        self._stopping = True
        await cancel_and_wait(self._background)
        await cancel_and_wait(list(self._resubmits))
        pending = list(self._tasks.values())
        if pending:
            _, still = await asyncio.wait(pending, timeout=grace_s)
            await cancel_and_wait(still)
