"""TurnAuditor: no turn hangs silently when Redis loses its state (ARCHITECTURE invariant 2).

Redis is a cache of turn state. A turn opens by saving its state before ``turn_started``
(``TurnIntake.start``), and its state lives until its ``complete`` has set the once-only
flag (``Finisher``): a running turn always has one of the two in Redis. So a turn that
memory still stores as running while Redis holds neither lost its state; nothing would
ever advance it. Every replica sweeps every few seconds:

1. memory lists the unfinished turns (assistant rows ``running``);
2. a turn past a short grace (memory records ``turn_started`` behind Kafka) with neither
   state nor ``complete`` flag is a candidate; one replica takes it (a short Redis lock);
3. its events are read back from Kafka (the session's partition of ``agent.events``):
   a ``complete`` there means memory only lags, and nothing is done; otherwise the
   turn's ``seq`` counter is set back to the highest seq found (clients that resume see
   no seq twice), any step still running it is cancelled, and it ends with ``error``
   ``turn_state_lost`` and one ``complete`` (failed) through the ``Finisher``;
4. after a loss, the requests that waited only in Redis (queued behind a running turn)
   are read back from ``agent.requests`` and handed to the intake again
   (``requests_replay``).

A turn whose state exists is never touched, however long it waits (a 10-minute shell
call, an approval): only lost state counts. A lost turn that was waiting for a person is
not ended: memory kept its state (``approvals.Suspensions``) and it is put back, to wait
for its decision or its expiry (SPEC H-02).

Redis coming back empty is also a readiness matter: the auditor keeps a sentinel key;
while it is missing (or was rewritten by another replica's recovery), ``/readyz`` reports
``turn_state`` degraded until this replica has run a full sweep.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Protocol

import httpx
import structlog
from pydantic import BaseModel
from redis.asyncio import Redis
from weft_contracts import AgentConfig, ErrorCode
from weft_platform.health import Degraded
from weft_platform.internal_auth import bearer
from weft_platform.tracing import propagation_hooks

from weft_engine.finalize import Finisher, TurnFailure
from weft_engine.keys import audit_lock_key, seq_key
from weft_engine.state import TurnState, without_trace
from weft_engine.trails import TurnTrail, TurnTrails

log = structlog.get_logger(__name__)

TURN_STATE_LOST = (
    "The engine lost this turn's working state (its cache was emptied), so the turn was "
    "stopped. Send the message again."
)

RECOVERY_RETRY_S = 1.0
"""How soon a failed sweep is tried again while a recovery is due."""

# Set the turn's counter to at least ARGV[1] (a step that lived through the loss may have
# counted on since): the events that follow carry higher seqs than every one in Kafka.
_RAISE_SEQ = """
local current = tonumber(redis.call('GET', KEYS[1]) or '0')
if current < tonumber(ARGV[1]) then redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2]) end
return 1
"""


@dataclass(frozen=True, kw_only=True)
class AuditSettings:
    """How often and how far back the auditor looks (``EngineSettings.audit_*``)."""

    interval_s: float = 5.0
    """Between two sweeps: with the Kafka read, the bound of a lost turn's hang."""
    grace_s: float = 3.0
    """A turn younger than this is skipped (memory may not have its start yet)."""
    lookback_s: float = 6 * 3600
    """Only turns started this recently (a turn's state lives at most this long)."""
    lock_ttl_s: float = 30.0
    """How long one replica owns a turn's recovery."""
    foreign_ttl_s: float = 600.0
    """How long a turn with no event in this deployment's topic is not looked at again."""
    kafka_margin_s: float = 60.0
    """The Kafka read starts this much before the turn's start (clock skew)."""
    page: int = 200
    """Turns asked of memory per request."""


class UnfinishedTurn(BaseModel):
    """A turn memory stores as running (memory's ``/internal/turns/unfinished``)."""

    tenant_id: str
    session_id: str
    request_id: str
    started_at: datetime


class UnfinishedTurns(Protocol):
    """Where the list of started, unended turns comes from (memory)."""

    async def page(self, started_after: datetime, limit: int) -> tuple[list[UnfinishedTurn], bool]:
        """Turns started after ``started_after``, oldest first, and whether more follow."""
        ...


class MemoryTurns:
    """:class:`UnfinishedTurns` over memory's internal HTTP API."""

    def __init__(
        self,
        base_url: str,
        timeout_s: float = 10.0,
        *,
        credential: Callable[[], str | None] = lambda: None,
    ):
        """``credential``: the engine's service credential for this cross-tenant route
        (``memory:turns.read``); no turn is at hand to vouch for the call."""
        self._http = httpx.AsyncClient(
            base_url=base_url, timeout=timeout_s, event_hooks=propagation_hooks()
        )
        self._credential = credential

    async def page(self, started_after: datetime, limit: int) -> tuple[list[UnfinishedTurn], bool]:
        """One page of ``GET /internal/turns/unfinished``."""
        params: dict[str, str | int] = {"started_after": started_after.isoformat(), "limit": limit}
        headers = bearer(self._credential())
        resp = await self._http.get("/internal/turns/unfinished", params=params, headers=headers)
        resp.raise_for_status()
        body = resp.json()
        return [UnfinishedTurn.model_validate(t) for t in body["turns"]], bool(body["more"])

    async def aclose(self) -> None:
        """Close the HTTP client."""
        await self._http.aclose()


@dataclass
class SweepReport:
    """What one sweep did (logged, and read by tests)."""

    unfinished: int = 0
    lost: list[str] = field(default_factory=list)
    """Turns without state or complete flag that this replica took."""
    ended: list[str] = field(default_factory=list)
    """Of those, the ones it ended with ``turn_state_lost``."""
    lagging: list[str] = field(default_factory=list)
    """Of those, the ones whose ``complete`` is in Kafka (memory lags): left alone."""
    foreign: list[str] = field(default_factory=list)
    """Of those, the ones with no event in this deployment's ``agent.events``: another
    deployment's turns on a shared database (test stacks, a staging copy), left alone."""
    replayed: list[str] = field(default_factory=list)
    """Requests that waited only in the lost Redis, handed to the intake again."""
    restored: list[str] = field(default_factory=list)
    """Turns that waited for a person, put back from memory's copy (SPEC H-02)."""


class TurnAuditor:
    """Finds turns whose Redis state was lost and ends them (see the module docstring)."""

    def __init__(
        self,
        *,
        redis: Redis,
        finisher: Finisher,
        turns: UnfinishedTurns,
        trails: TurnTrails,
        settings: AuditSettings,
        sentinel_key: str,
        cancel_channel: str,
        owner: str,
        state_ttl_s: int,
        record_credential: Callable[[], str | None] = lambda: None,
        replay: Callable[[float], Awaitable[list[str]]] | None = None,
        restore: Callable[[str, str | None], Awaitable[TurnState | None]] | None = None,
    ):
        """``record_credential``: the engine's service credential on the events that end
        a lost turn (its own request credential was lost with its state)."""
        self._redis = redis
        self._replay = replay
        self._restore = restore
        """Puts back a turn that waited for a person from memory's copy (SPEC H-02)."""
        self._finisher = finisher
        self._turns = turns
        self._trails = trails
        self._settings = settings
        self._sentinel_key = sentinel_key
        self._cancel_channel = cancel_channel
        self._owner = owner
        self._ttl = state_ttl_s
        self._record_credential = record_credential
        self._raise_seq = redis.register_script(_RAISE_SEQ)
        self._sentinel: bytes | str | None = None
        """The sentinel value this replica last saw (None: not seen yet)."""
        self._recovering = False
        """Redis lost its data: a full sweep must run before this replica is ready."""

    async def run(self) -> None:
        """Sweep every ``interval_s`` until cancelled. A failed sweep (memory, Kafka or
        Redis unreachable) is logged and tried again, within a second while a recovery is
        due (readiness stays degraded until one succeeds)."""
        while True:
            try:
                await self.sweep()
            except Exception:
                log.exception("turn_audit_failed")
            pause = self._settings.interval_s
            await asyncio.sleep(min(pause, RECOVERY_RETRY_S) if self._recovering else pause)

    async def ready(self) -> bool:
        """Readiness check ``turn_state``: raises :class:`Degraded` while the sentinel is
        missing (Redis came back empty), or was rewritten by another replica's recovery,
        until this replica has run a full sweep."""
        current = await self._redis.get(self._sentinel_key)
        if self._recovering or current is None or self._replaced(current):
            raise Degraded("redis lost its data; a recovery sweep is pending")
        return True

    def _replaced(self, current: bytes | str) -> bool:
        return self._sentinel is not None and current != self._sentinel

    async def sweep(self) -> SweepReport:
        """One pass over every unfinished turn; then, if Redis had been emptied, the
        sentinel is written again and readiness comes back."""
        current = await self._redis.get(self._sentinel_key)
        if current is None or self._replaced(current):
            if not self._recovering:
                log.warning("turn_state_recovery_started", sentinel_found=current is not None)
            self._recovering = True
        elif self._sentinel is None:
            self._sentinel = current  # first sight: another replica vouched for this Redis
        report = SweepReport()
        now = time.time()
        after = datetime.fromtimestamp(now - self._settings.lookback_s, UTC)
        more = True
        while more:
            page, more = await self._turns.page(after, self._settings.page)
            report.unfinished += len(page)
            await self._audit(page, now, report)
            if page:
                after = page[-1].started_at
            else:
                more = False
        if self._recovering:
            if self._replay is not None:  # after the lost turns ended: sessions are free
                report.replayed = await self._replay(now)
            await self._vouch()
        if report.lost:
            log.warning("turn_audit", unfinished=report.unfinished, lost=report.lost,
                        ended=report.ended, lagging=report.lagging,
                        foreign=report.foreign)  # fmt: skip
        return report

    async def _vouch(self) -> None:
        """Write the sentinel (unless another replica just did) and remember its value."""
        await self._redis.set(self._sentinel_key, secrets.token_hex(8), nx=True)
        self._sentinel = await self._redis.get(self._sentinel_key)
        self._recovering = False
        log.info("turn_state_audited")

    async def _audit(self, turns: list[UnfinishedTurn], now: float, report: SweepReport) -> None:
        old = [t for t in turns if now - t.started_at.timestamp() >= self._settings.grace_s]
        lost = [t for t in await self._stateless(old) if await self._take(t)]
        if not lost:
            return
        report.lost += [t.request_id for t in lost]
        trails = await self._trails.read(lost)
        # Reading Kafka takes a while: a turn put back meanwhile (a decision restored a
        # waiting turn from memory, SPEC H-02) has a state again and is left alone.
        still = {t.request_id for t in await self._stateless(lost)}
        for turn in lost:
            if turn.request_id not in still:
                report.restored.append(turn.request_id)
                continue
            trail = trails.get(turn.request_id, TurnTrail())
            if trail.completed:
                report.lagging.append(turn.request_id)
                continue
            if trail.last_seq == 0:
                # Every turn memory knows started with a turn_started on this topic: none
                # here means another deployment's turn. Not looked at again for a while.
                report.foreign.append(turn.request_id)
                await self._set_aside(turn)
                continue
            if self._restore is not None and await self._restore(turn.request_id, None):
                report.restored.append(turn.request_id)  # it waits for a person again
                continue
            if not await self._stateless([turn]):
                # Put back while memory was asked (a decision restored it, and memory no
                # longer keeps a copy once it has): ending it now would stop a live turn.
                report.restored.append(turn.request_id)
                continue
            await self._end(turn, trail)
            report.ended.append(turn.request_id)

    async def _stateless(self, turns: list[UnfinishedTurn]) -> list[UnfinishedTurn]:
        """The turns with neither a stored state nor a ``complete`` flag."""
        return await without_trace(self._redis, turns)

    async def _take(self, turn: UnfinishedTurn) -> bool:
        """Whether this replica recovers the turn (one replica does, for ``lock_ttl_s``)."""
        lock = audit_lock_key(turn.request_id)
        ttl_ms = int(self._settings.lock_ttl_s * 1000)
        return bool(await self._redis.set(lock, self._owner, nx=True, px=ttl_ms))

    async def _set_aside(self, turn: UnfinishedTurn) -> None:
        """Hold the turn's lock for ``foreign_ttl_s``: its Kafka trail is not read again
        every sweep."""
        ttl_ms = int(self._settings.foreign_ttl_s * 1000)
        await self._redis.set(audit_lock_key(turn.request_id), "foreign", px=ttl_ms)

    async def _end(self, turn: UnfinishedTurn, trail: TurnTrail) -> None:
        """Stop any step still running the turn, count on from Kafka's last seq, fail it."""
        rid = turn.request_id
        await self._redis.publish(self._cancel_channel, rid)
        await self._raise_seq(keys=[seq_key(rid)], args=[trail.last_seq, self._ttl])
        failure = TurnFailure(
            code=ErrorCode.TURN_STATE_LOST, message=TURN_STATE_LOST, retryable=True,
            detail=f"no state and no complete in redis; last seq in kafka {trail.last_seq}",
        )  # fmt: skip
        await self._finisher.fail(_lost_state(turn, self._record_credential()), failure)


def _lost_state(turn: UnfinishedTurn, credential: str | None) -> TurnState:
    """What the Finisher needs of a turn whose state is gone: its ids and start. The agent
    is unknown (it lived in the state); nothing of it is read when failing a turn."""
    return TurnState(
        tenant_id=turn.tenant_id,
        session_id=turn.session_id,
        request_id=turn.request_id,
        user_id="",
        credential=credential,
        agent=AgentConfig(agent_id="unknown", model="unknown"),
        messages=[],
        started_at=turn.started_at.timestamp(),
    )
