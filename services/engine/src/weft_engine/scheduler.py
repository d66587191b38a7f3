"""StepScheduler: runs turn steps as tasks so one slow turn never blocks another.

Kafka handlers only record what arrived and submit the turn; the step (LLM stream, tool
dispatch) runs in its own task under a lease. At most ``max_inflight`` steps run per
replica: beyond that ``submit`` waits, so the consumer stops fetching and requests wait
in Kafka, not in memory (invariant 6). A reaper claims turns whose replica died and turns
whose tool deadline passed (invariants 2 and 4).

A submitter that has just written the turn's state hands it over with the submission: the
step starts from it when the lease claim reads the same version, instead of loading it.

One tenant holds at most ``tenant_max_local`` of the replica's step slots (all but one by
default), so a tenant whose turns all land here leaves a slot to the others. A step over
its tenant's share does not wait in the Kafka handler: it is deferred, in memory to start
here as soon as one of its tenant's steps ends, and in Redis as due after the lease TTL
(the reaper's due list), so that another replica runs it if this one dies. The reaper
reads a reaped turn's state first, so its step counts against its tenant's share too.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter, OrderedDict
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


@dataclass(frozen=True)
class _Deferred:
    """A step over its tenant's share of this replica, waiting for one of its steps."""

    tenant_id: str
    state: TurnState | None
    takeover: bool


def local_share(max_inflight: int, configured: int | None) -> int | None:
    """A tenant's step slots on one replica: ``configured`` (0: no limit), else all but
    one (at least one)."""
    if configured is None:
        return max(1, max_inflight - 1)
    return configured or None


USER_STOP = "user_stop"
"""The cancel message of a user's stop (a shutdown's cancel carries none)."""
STOP_REDELIVERY_S = 0.25
"""How soon a stop the step has not taken yet is delivered again (:meth:`StepScheduler.cancel`)."""


class StepScheduler:
    """Owns this replica's running steps and its background reaper."""

    def __init__(
        self,
        leases: TurnLeases,
        run_step: RunStep,
        *,
        max_inflight: int,
        ttl_s: float,
        tenant_max_local: int | None = None,
        load: Callable[[str], Awaitable[TurnState | None]] | None = None,
    ):
        self._leases = leases
        self._run_step = run_step
        self._slots = asyncio.Semaphore(max_inflight)
        self._ttl = ttl_s
        self._share = tenant_max_local
        """A tenant's step slots here; None: no limit."""
        self._load = load
        """Reads a turn's state (``TurnStore.load``): how the reaper learns a turn's
        tenant when another replica deferred it or ran it."""
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._tenant_of: dict[str, str] = {}
        """The tenant of each running step whose submitter named one."""
        self._held: Counter[str] = Counter()
        self._deferred: OrderedDict[str, _Deferred] = OrderedDict()
        """Steps over their tenant's share, oldest first."""
        self._again: dict[str, _Again] = {}
        """Turns submitted while their step ran here: submitted again once it ended."""
        self._resubmits: set[asyncio.Task[bool]] = set()
        self._background: list[asyncio.Task[None]] = []
        self._stopping = False

    def running(self, request_id: str) -> bool:
        """Whether this replica runs a step of the turn now."""
        return request_id in self._tasks

    async def submit(
        self,
        request_id: str,
        *,
        takeover: bool = False,
        state: TurnState | None = None,
        tenant_id: str = "",
    ) -> bool:
        """Run the turn's next step here unless another replica holds it; waits for a slot.
        ``state``: the turn's state as the caller just saved it. ``tenant_id`` (else the
        state's, else the tenant it was deferred for): a step over its tenant's share of
        this replica is deferred (False), not waited for.

        When the turn's step runs here already, the turn is submitted again once that step
        ends: a tool result can arrive while the step that dispatched the call still waits
        for Kafka's acks, before it gives the turn back."""
        tenant = self._tenant(request_id, tenant_id, state)
        if request_id in self._tasks:
            self._queue_again(request_id, state, takeover)
            return False
        if await self._defer_over_share(request_id, tenant, state, takeover):
            return False
        await self._slots.acquire()
        if await self._defer_over_share(request_id, tenant, state, takeover):
            self._slots.release()  # another of its tenant's steps started while it waited
            return False
        claim = await self._leases.claim_step(request_id)
        if claim is None:
            self._slots.release()
            return False
        self._start(StepStart(request_id, takeover, claim, state), tenant)
        return True

    async def reserve(self, request_id: str, tenant_id: str = "") -> LeaseRequest | None:
        """Take a step slot for the turn now, without waiting, and say what claiming its
        lease takes (for a write that claims it alongside, ``TurnStore.save_claiming``);
        None when the turn's step runs here already, every slot is busy, or its tenant
        holds its share. The caller then either starts the step (:meth:`start_claimed`)
        or gives the slot back (:meth:`unreserve`)."""
        if request_id in self._tasks or self._slots.locked() or self._over_share(tenant_id):
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
        self._start(StepStart(request_id, False, claim, state), state.tenant_id)
        return True

    def _start(self, start: StepStart, tenant_id: str) -> None:
        request_id = start.request_id
        self._deferred.pop(request_id, None)
        if tenant_id:
            self._tenant_of[request_id] = tenant_id
            self._held[tenant_id] += 1
        self._tasks[request_id] = asyncio.create_task(self._run(start), name=f"turn:{request_id}")

    def _tenant(self, request_id: str, tenant_id: str, state: TurnState | None) -> str:
        if tenant_id:
            return tenant_id
        if state is not None:
            return state.tenant_id
        deferred = self._deferred.get(request_id)
        return deferred.tenant_id if deferred is not None else ""

    async def _known(self, request_id: str) -> TurnState | None:
        """The state a reaped turn's step may start from, which names its tenant for the
        share: the one it was deferred with here, else loaded (the step would load it
        anyway). None when there is nothing to load, or loading fails (the step then
        loads it, and a state that cannot be read fails the turn there)."""
        deferred = self._deferred.get(request_id)
        if deferred is not None and deferred.state is not None:
            return deferred.state
        if self._load is None:
            return None
        try:
            return await self._load(request_id)
        except Exception:
            log.warning("reaped_state_unread", request_id=request_id, exc_info=True)
            return None

    def _over_share(self, tenant_id: str) -> bool:
        return bool(tenant_id) and self._share is not None and self._held[tenant_id] >= self._share

    async def _defer_over_share(
        self, request_id: str, tenant_id: str, state: TurnState | None, takeover: bool
    ) -> bool:
        """Defer the step when its tenant holds its share here: kept to start when one of
        the tenant's steps ends here, and due in Redis after the lease TTL (a takeover by
        any replica's reaper if this one is gone; here, deferred again while over)."""
        if not self._over_share(tenant_id):
            return False
        queued = self._deferred.get(request_id)  # deferred again: keeps its place in line
        if queued is not None:  # and what the first submitter held
            state, takeover = state or queued.state, takeover or queued.takeover
        self._deferred[request_id] = _Deferred(tenant_id, state, takeover)
        await self._leases.set_deadline(request_id, time.time() + self._ttl)
        log.info("step_deferred_for_share", request_id=request_id, tenant_id=tenant_id)
        return True

    def unreserve(self) -> None:
        """Give back a slot :meth:`reserve` took."""
        self._slots.release()

    def cancel(self, request_id: str) -> bool:
        """Interrupt the local step of the turn (user stop); True when there was one."""
        task = self._tasks.get(request_id)
        if task is None:
            return False
        task.cancel(USER_STOP)
        self._deliver_stop(request_id, task)
        return True

    def _deliver_stop(self, request_id: str, task: asyncio.Task[None]) -> None:
        """Cancel the step again every ``STOP_REDELIVERY_S`` while it runs with the stop
        unhandled (``task.cancelling()`` stays above 0 until ``TurnLoop`` takes the stop
        and uncancels itself). Python 3.11's ``asyncio.wait_for``, which redis-py awaits
        for each command it sends, returns its result when a cancel lands as the result
        arrives, and the cancel is lost: the step streamed a whole answer after the
        user's stop and the turn ended ``completed`` (a CI run under load)."""
        loop = asyncio.get_running_loop()

        def check() -> None:
            if task.done() or self._tasks.get(request_id) is not task:
                return
            if task.cancelling() == 0:
                return  # the step took the stop
            log.info("stop_delivered_again", request_id=request_id)
            task.cancel(USER_STOP)
            loop.call_later(STOP_REDELIVERY_S, check)

        loop.call_later(STOP_REDELIVERY_S, check)

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
            tenant = self._tenant_of.pop(request_id, "")
            if tenant:
                self._held[tenant] -= 1
                if not self._held[tenant]:
                    del self._held[tenant]
            self._slots.release()
            self._submit_again(request_id, tenant)
            self._start_deferred(tenant)

    def _queue_again(self, request_id: str, state: TurnState | None, takeover: bool) -> None:
        """Submit the turn again once its running step ends; a takeover stays one (the
        reaper can see a crashed step's lease given up before the step has left here, and
        a takeover is what counts the turn's attempts, SPEC E-04)."""
        queued = self._again.get(request_id)
        self._again[request_id] = _Again(
            state, takeover or (queued is not None and queued.takeover)
        )

    def _submit_again(self, request_id: str, tenant_id: str) -> None:
        if request_id not in self._again:
            return
        again = self._again.pop(request_id)
        log.debug("step_submitted_again", request_id=request_id, takeover=again.takeover)
        self._resubmit(request_id, again.takeover, again.state, tenant_id)

    def _start_deferred(self, tenant_id: str) -> None:
        """A step of ``tenant_id`` ended here: submit its oldest deferred step."""
        if not tenant_id or self._over_share(tenant_id):
            return
        waiting = next((r for r, d in self._deferred.items() if d.tenant_id == tenant_id), None)
        if waiting is not None:  # deferred anew if its tenant is still over its share then
            deferred = self._deferred.pop(waiting)
            self._resubmit(waiting, deferred.takeover, deferred.state, tenant_id)

    def _resubmit(
        self, request_id: str, takeover: bool, state: TurnState | None, tenant_id: str
    ) -> None:
        if self._stopping:
            return  # the turn's lease or deadline hands it to another replica
        resubmit = self.submit(request_id, takeover=takeover, state=state, tenant_id=tenant_id)
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
                    await self.submit(
                        request_id, takeover=True, state=await self._known(request_id)
                    )
                for request_id in await self._leases.due():
                    await self.submit(request_id, state=await self._known(request_id))
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
