"""TurnIntake: the engine's Kafka handlers. Each only records what arrived and submits the
turn to the scheduler, so a consumer never waits on an LLM call (invariant 4)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any

import structlog
from redis.asyncio import Redis
from redis.exceptions import RedisError
from weft_contracts import (
    ApprovalDecided,
    CancelRequested,
    ChatRequested,
    CompleteData,
    ErrorCode,
    ErrorData,
    ErrorEvent,
    SteerMessage,
    ToolCallCompleted,
    TurnStartedData,
    TurnStartedEvent,
    TurnStatus,
    outcome_unknown,
)

from weft_engine.approvals import ApprovalDesk, authorization_needed
from weft_engine.context import ContextManager, HistoryUnavailable
from weft_engine.emitter import EventEmitter
from weft_engine.finalize import Finisher, TurnFailure
from weft_engine.keys import cancel_key
from weft_engine.parked_images import ParkedImages
from weft_engine.question_origin import with_question_source
from weft_engine.reporting import ResultReporter
from weft_engine.scheduler import StepScheduler
from weft_engine.sessions import START_RETRY_S, HandedOver, SessionGate, SteerInbox
from weft_engine.state import StaleTurnState, TurnState, TurnStore
from weft_engine.turn_cap import DEFER_S, TurnCap, round_robin
from weft_engine.turn_metrics import turn_started
from weft_engine.vision import route_images

log = structlog.get_logger(__name__)

START_BATCH = 500
"""Due pending starts one sweep takes at most (a flooding tenant's deferred turns among
them; the sweep orders them round-robin by tenant)."""
OPENED_REMEMBERED = 10_000
"""Turns a replica remembers having opened: far more than its handler retries span."""
SESSION_BUSY = "this session already runs a turn (double_texting=reject)"
HISTORY_UNAVAILABLE = (
    "The conversation's history could not be loaded (the memory service is unavailable). "
    "Try again in a moment."
)


class TurnIntake:
    """Handlers of ``agent.requests``, ``tool.results`` and ``agent.control``."""

    def __init__(
        self,
        *,
        redis: Redis,
        store: TurnStore,
        emitter: EventEmitter,
        context: ContextManager,
        sessions: SessionGate,
        inbox: SteerInbox,
        reporter: ResultReporter,
        finisher: Finisher,
        scheduler: StepScheduler,
        cancel_channel: str,
        ttl_s: int,
        images: ParkedImages,
        turn_deadline_s: float,
        cap: TurnCap | None = None,
        desk: ApprovalDesk | None = None,
        keep: Callable[[TurnState], Awaitable[None]] | None = None,
        uncertain: Callable[[ToolCallCompleted], Awaitable[TurnState | None]] | None = None,
        authorize: Callable[[ToolCallCompleted], Awaitable[TurnState | None]] | None = None,
    ):
        """``desk`` applies approval decisions; ``keep`` stores the state of a turn that
        waits for a person in memory after a result changed it (``approvals``)."""
        self._desk = desk
        self._keep = keep
        self._uncertain = uncertain
        """Turns a worker's "outcome unknown" for a write into a prompt (SPEC H-05)."""
        self._authorize = authorize
        """Turns an MCP server's "authorisation required" into a prompt (SPEC H-06)."""
        self._redis = redis
        self._store = store
        self._emitter = emitter
        self._context = context
        self._sessions = sessions
        self._inbox = inbox
        self._reporter = reporter
        self._finisher = finisher
        self._scheduler = scheduler
        self._channel = cancel_channel
        self._ttl = ttl_s
        self._images = images
        self._turn_deadline_s = turn_deadline_s
        self._cap = cap or TurnCap(redis, "engine:turns", cap=0, turn_deadline_s=turn_deadline_s)
        self._opened: OrderedDict[str, None] = OrderedDict()
        """Turns whose ``turn_started`` this replica sent, newest last (bounded)."""
        finisher.start_queued = self.start_handed_over

    async def on_chat_requested(self, request: ChatRequested) -> None:
        """Start the turn, or apply the double-texting strategy when the session is busy.

        A redelivered request whose turn is still ``opening`` (the replica opening it died
        before its first step) finishes the opening here."""
        rid = request.request_id
        known = await self._store.load(rid)
        if known is not None and known.phase == "think":
            # Opened, and its replica may have died before its first step took the lease
            # (waiting for a step slot): no lease to expire, no reaper would find it. The
            # lease decides: a step running elsewhere keeps the turn.
            await self._scheduler.submit(rid, state=known)
            return
        if (known is not None and known.phase != "opening") or await self._emitter.completed(rid):
            return  # redelivery of a turn already started
        claim = await self._sessions.claim(request.tenant_id, request.session_id, rid)
        holder = claim.holder
        if holder is None:
            if not await self._cap.take(request.tenant_id, rid):
                # Over its tenant's turn cap: kept in Redis (before this offset commits)
                # and opened by retry_starts once a slot is free (invariants 3 and 5).
                log.info("turn_deferred_by_tenant_cap", request_id=rid,
                         tenant_id=request.tenant_id)  # fmt: skip
                await self._sessions.defer(request, claim.previous, DEFER_S)
                return
            if known is None:
                await self.start(request, claim.previous)
            else:
                await self._open(request, known, claim.previous)
            return
        match request.data.double_texting:
            case "reject":
                await self._reject(request)
            case "enqueue":
                await self._sessions.enqueue(request)
            case "interrupt":
                await self._sessions.enqueue(request)
                await self.cancel(holder)

    async def start_handed_over(self, handed: HandedOver) -> bool:
        """Open the turn of a queued request that became its session's running turn (the
        session is claimed for it), unless an earlier try opened it already, then drop its
        pending start. False when its tenant is at its turn cap: the pending start stays,
        due again in ``DEFER_S``. Raises when opening fails: the pending start stays, due
        later."""
        request, rid = handed.request, handed.request.request_id
        previous = handed.previous or None
        known = await self._store.load(rid)
        if await self._emitter.completed(rid):
            # A duplicate queued entry of a turn that ran already (the requests replay after
            # a loss of Redis can queue one): the session goes on to the next request.
            await self._sessions.started(handed)
            await self._cap.release(request.tenant_id, rid)
            await self._finisher.pass_on(request.tenant_id, request.session_id, rid)
            return True
        if known is None or known.phase == "opening":
            if not await self._cap.take(request.tenant_id, rid):
                await self._sessions.postpone(handed, DEFER_S)
                return False
            if known is None:
                await self.start(request, previous)
            else:  # an earlier try saved the opening state, then stopped
                await self._open(request, known, previous)
        await self._sessions.started(handed)
        return True

    async def retry_starts(self, interval_s: float = 2.0) -> None:
        """Start the pending starts that are due, for the life of the replica: queued
        requests whose start failed or whose replica died after taking them off the queue
        (``SessionGate``), and turns deferred by their tenant's cap (``TurnCap``). A slot
        given back on any replica starts a sweep at once (``listen_for_cancels``)."""
        while True:
            self._cap.freed.clear()
            try:
                await self.start_due()
            except RedisError as exc:
                log.warning("pending_starts_unreadable", error=repr(exc))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._cap.freed.wait(), interval_s)

    async def start_due(self) -> None:
        """One sweep: the due pending starts, round-robin by tenant (each tenant's in due
        order), so a tenant's backlog of deferred turns does not go before another
        tenant's one. A tenant found at its cap is passed over for the rest of the sweep."""
        due = await self._sessions.due_starts(START_BATCH)
        full: set[str] = set()
        for handed in round_robin(due, lambda h: h.request.tenant_id):
            tenant = handed.request.tenant_id
            if tenant in full:
                await self._sessions.postpone(handed, DEFER_S)
                continue
            try:
                async with self._sessions.starting(handed):
                    if not await self.start_handed_over(handed):
                        full.add(tenant)
            except Exception as exc:
                log.warning("queued_start_failed", error=repr(exc),
                            request_id=handed.request.request_id)  # fmt: skip
                await self._sessions.postpone(handed, START_RETRY_S)

    async def start(self, request: ChatRequested, previous: str | None = None) -> None:
        """Open the turn: its state first (so that a started turn always has a stored
        state, which the ``TurnAuditor`` relies on), ``turn_started``, history from memory,
        then the first step. ``previous``: the session's last ended turn, which the history
        must hold."""
        if request.request_id in self._opened:
            # Opened here, and its state is gone (Redis lost it while the handler ran, and
            # the bus retried it): opening again would send a second turn_started with
            # seq 1. The TurnAuditor ends the turn, counting on from Kafka's last seq.
            log.warning("turn_state_lost_while_opening", request_id=request.request_id)
            return
        now = time.time()
        opening = TurnState(
            **_ids(request),
            user_id=request.data.user_id,
            agent=request.data.agent,
            budget=request.data.budget,
            messages=[],
            phase="opening",
            started_at=now,
            deadline_at=_deadline(now + self._turn_deadline_s, request),
        )
        try:
            # The same round trip reserves turn_started's seq (the turn's counter starts
            # here: EventEmitter refuses to count on a counter that does not exist).
            opening, _ = await self._store.save_reserving(opening, 1)
        except StaleTurnState:
            return  # a duplicate delivery: another replica opens the turn
        await self._open(request, opening, previous)

    async def _open(self, request: ChatRequested, state: TurnState, previous: str | None) -> None:
        """Emit ``turn_started`` (seq 1, reserved by the opening save: a repeat after a
        crash carries the same seq, which consumers de-duplicate), load the history, save
        the state ready to think, submit the first step."""
        ids = state.ids()
        data = request.data
        started = TurnStartedData(
            query=data.query,
            user_id=data.user_id,
            agent_id=data.agent.agent_id,
            mode=data.mode,
            memory_enabled=data.agent.memory_enabled,
            images=data.images,
            locale=data.locale,
        )
        self._remember_opened(request.request_id)
        turn_started(request.tenant_id, data.mode)
        await self._emitter.queue_reserved(ids, [(TurnStartedEvent, started)], range(1, 2))
        await self._emitter.flush(request.request_id)
        try:
            messages, turn_ids, scale = await self._context.opening(
                data.agent, request.tenant_id, request.session_id, data.user_id, data.query, ids,
                data.images, previous=previous,
            )  # fmt: skip
        except HistoryUnavailable as exc:
            failure = TurnFailure(
                code=ErrorCode.HISTORY_UNAVAILABLE, message=HISTORY_UNAVAILABLE,
                retryable=True, detail=str(exc),
            )  # fmt: skip
            await self._finisher.fail(state, failure)
            return
        messages = with_question_source(messages, data.question_origin)
        unread = [] if route_images(data.agent, data.images) == "direct" else data.images
        messages, unread = await self._images.park(request.request_id, messages, unread)
        state = state.model_copy(
            update={
                "phase": "think",
                "messages": messages,
                "turn_ids": turn_ids,
                "images_to_describe": unread,
                "token_scale": scale,
            }
        )
        try:
            saved = await self._store.save(state)
        except StaleTurnState:
            return  # a redelivery opened it at the same time and saved first
        await self._scheduler.submit(request.request_id, state=saved)

    def _remember_opened(self, request_id: str) -> None:
        self._opened[request_id] = None
        if len(self._opened) > OPENED_REMEMBERED:
            self._opened.popitem(last=False)

    async def on_tool_result(self, result: ToolCallCompleted) -> None:
        """Record a result; when the dispatched calls have all answered, advance the turn.

        With a step slot free, the write that records the round's last result also takes
        the step's lease, and the step starts from the state just written (no round trip
        between the result and the next LLM call).

        Recording is idempotent (a result already in the state changes nothing), so this
        consumer needs no de-duplication of its own; a redelivered result still submits the
        step, which a crash between recording and submitting would otherwise leave unrun.
        """
        rid = result.request_id
        if (  # SPEC H-05: a person decides (ToolRound keeps the turn in memory first)
            self._uncertain is not None
            and outcome_unknown(result.data)
            and await self._uncertain(result) is not None
        ):
            return
        if (  # SPEC H-06: the user authorises the MCP server, then the call runs again
            self._authorize is not None
            and authorization_needed(result.data) is not None
            and await self._authorize(result) is not None
        ):
            return
        lease = await self._scheduler.reserve(rid, result.tenant_id)
        try:
            recorded = await self._reporter.record(result, lease)
        except BaseException:
            if lease is not None:
                self._scheduler.unreserve()
            raise
        if recorded is not None and self._keep is not None and recorded.state.waiting_on_person():
            await self._keep(recorded.state)
        if recorded is not None and recorded.claim is not None:
            self._scheduler.start_claimed(rid, recorded.claim, recorded.state)
        else:
            if lease is not None:
                self._scheduler.unreserve()
            if recorded is not None and recorded.state.tools_answered():
                await self._scheduler.submit(rid, state=recorded.state)
        await self._emitter.flush(rid)  # acked before the offset commit

    async def on_control(self, message: Any) -> None:
        """Stop or steer the session's running turn, or apply an approval decision."""
        if isinstance(message, ApprovalDecided):
            if self._desk is None:
                log.warning("approval_without_desk", request_id=message.request_id)
                return
            await self._desk.on_decision(message)
            return
        rid = await self._target(message)
        if rid is None:
            log.info("control_without_turn", type=message.type, session_id=message.session_id)
            return
        match message:
            case CancelRequested():
                await self.cancel(rid)
            case SteerMessage():
                await self._inbox.put(rid, message.data.content)

    async def cancel(self, request_id: str) -> None:
        """Flag the turn stopped; the replica running it is told at once through Redis."""
        log.info("cancel_requested", request_id=request_id)
        await self._redis.set(cancel_key(request_id), 1, ex=self._ttl)
        await self._redis.publish(self._channel, request_id)
        await self._scheduler.submit(request_id)  # a turn waiting for tools ends now

    async def _target(self, message: CancelRequested | SteerMessage) -> str | None:
        if await self._store.load(message.request_id) is not None:
            return message.request_id
        return await self._sessions.active(message.tenant_id, message.session_id)

    async def _reject(self, request: ChatRequested) -> None:
        ids = _ids(request)
        await self._emitter.emit(
            ErrorEvent,
            ids,
            ErrorData(code=ErrorCode.SESSION_BUSY.value, message=SESSION_BUSY),
            opens=True,  # the refused request never started: its events count from 1
        )
        await self._emitter.complete(ids, CompleteData(status=TurnStatus.FAILED))

    async def listen_for_cancels(self) -> None:
        """Cancel local steps named on the cancel channel, and sweep the pending starts
        when any replica gives a turn slot back (every replica listens to both).

        Polls with a short timeout (below the Redis client's socket timeout) and
        resubscribes after a connection error, so the listener never dies quietly.
        """
        freed = self._cap.channel.encode()
        while True:
            pubsub = self._redis.pubsub()
            try:
                await pubsub.subscribe(self._channel, self._cap.channel)
                while True:
                    item = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1.0)
                    if not item or item.get("type") != "message":
                        continue
                    if item.get("channel") == freed:
                        self._cap.freed.set()
                        continue
                    request_id = item["data"].decode()
                    if self._scheduler.cancel(request_id):
                        log.info("step_cancelled", request_id=request_id)
            except RedisError:
                log.warning("cancel_listener_reconnecting")
                await asyncio.sleep(0.5)
            finally:
                with contextlib.suppress(Exception):
                    # redis-py leaves PubSub.aclose unannotated
                    await asyncio.shield(pubsub.aclose())  # type: ignore[no-untyped-call]


def _ids(request: ChatRequested) -> dict[str, Any]:
    return {
        "tenant_id": request.tenant_id,
        "session_id": request.session_id,
        "request_id": request.request_id,
        "traceparent": request.traceparent,
        "credential": request.credential,
    }


def _deadline(own: float, request: ChatRequested) -> float:
    """The turn's bound: the engine's own, or the request's when that is earlier (the
    gateway counts it from the request, and the turn's credential expires with it, so a
    turn that waited in the queue does not outlive what it may call)."""
    requested = request.data.deadline
    return own if requested is None else min(own, requested.timestamp())
