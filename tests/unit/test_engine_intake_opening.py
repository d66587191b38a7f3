"""How a turn opens (TurnIntake) on an in-memory Redis: its state is stored before
``turn_started`` is published, so a started turn always has a state the TurnAuditor can
miss (ARCHITECTURE invariant 2); a replica that dies while opening leaves the state in
phase ``opening``, and the redelivered ``ChatRequested`` finishes the opening."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, cast

import pytest
from fakeredis import FakeAsyncRedis
from weft_contracts import (
    AgentConfig,
    ChatRequested,
    ChatRequestedData,
    Envelope,
    Topic,
    TurnStartedEvent,
)
from weft_engine.context import ContextManager
from weft_engine.emitter import EventEmitter
from weft_engine.finalize import Finisher
from weft_engine.intake import TurnIntake
from weft_engine.leases import TurnLeases
from weft_engine.parked_images import ParkedImages
from weft_engine.reporting import ResultReporter
from weft_engine.scheduler import StepScheduler
from weft_engine.sessions import SessionGate, SteerInbox
from weft_engine.state import TurnState, TurnStore
from weft_platform.bus import EventBus


@dataclass
class _Bus:
    """Keeps what is published, and whether the turn's state was stored at that moment."""

    store: TurnStore
    sent: list[tuple[Envelope, TurnState | None]] = field(default_factory=list)

    async def publish(self, topic: Topic, message: Envelope) -> None:
        self.sent.append((message, await self.store.load(message.request_id)))

    async def publish_nowait(self, topic: Topic, message: Envelope) -> asyncio.Future[Any]:
        await self.publish(topic, message)
        done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done


class _Context:
    """The opening's history: none, and a system and user message."""

    opened: int = 0

    async def opening(self, *_: Any, **__: Any) -> tuple[list[dict[str, Any]], list[str], float]:
        self.opened += 1
        return [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}], [], 1.0


@dataclass
class _Scheduler:
    submitted: list[tuple[str, TurnState | None]] = field(default_factory=list)

    async def submit(self, request_id: str, *, state: TurnState | None = None, **_: Any) -> bool:
        self.submitted.append((request_id, state))
        return True


@dataclass
class _Engine:
    intake: TurnIntake
    store: TurnStore
    bus: _Bus
    scheduler: _Scheduler
    context: _Context
    redis: FakeAsyncRedis


@pytest.fixture
def engine() -> _Engine:
    redis = FakeAsyncRedis()
    store = TurnStore(redis, 600)
    bus = _Bus(store)
    emitter = EventEmitter(cast(EventBus, bus), redis, ttl_s=600)
    leases = TurnLeases(redis, owner="e1", namespace="t.", ttl_s=3)
    sessions = SessionGate(redis, 600)
    finisher = Finisher(emitter=emitter, store=store, leases=leases, sessions=sessions)
    scheduler, context = _Scheduler(), _Context()
    intake = TurnIntake(
        redis=redis, store=store, emitter=emitter, context=cast(ContextManager, context),
        sessions=sessions, inbox=SteerInbox(redis, 600),
        reporter=ResultReporter(store, emitter), finisher=finisher,
        scheduler=cast(StepScheduler, scheduler), cancel_channel="c", ttl_s=600,
        images=ParkedImages(redis, 600), turn_deadline_s=1200,
    )  # fmt: skip
    return _Engine(intake, store, bus, scheduler, context, redis)


def _request() -> ChatRequested:
    data = ChatRequestedData(query="q", user_id="u1", agent=AgentConfig(agent_id="a", model="m"))
    return ChatRequested(tenant_id="t1", session_id="s1", request_id="r1", data=data)


async def test_the_state_is_stored_before_turn_started_is_published(engine: _Engine) -> None:
    await engine.intake.on_chat_requested(_request())
    [(started, state_then)] = engine.bus.sent
    assert isinstance(started, TurnStartedEvent) and started.seq == 1
    assert state_then is not None and state_then.phase == "opening"
    opened = await engine.store.load("r1")
    assert opened is not None and opened.phase == "think" and len(opened.messages) == 2
    assert engine.scheduler.submitted == [("r1", opened)]


async def test_a_redelivery_finishes_an_opening_cut_short_and_nothing_more(
    engine: _Engine,
) -> None:
    request = _request()
    # The replica that opened it died after its first save (turn_started maybe sent).
    state = TurnState(
        tenant_id="t1", session_id="s1", request_id="r1", user_id="u1",
        agent=request.data.agent, messages=[], phase="opening", started_at=1.0,
    )  # fmt: skip
    await engine.store.save_reserving(state, 1)
    assert await engine.store.load("r1") is not None
    await engine.intake.on_chat_requested(request)
    # turn_started again with its reserved seq (consumers drop a seq they hold already).
    assert [(type(e), e.seq) for e, _ in engine.bus.sent] == [(TurnStartedEvent, 1)]
    opened = await engine.store.load("r1")
    assert opened is not None and opened.phase == "think"
    assert [rid for rid, _ in engine.scheduler.submitted] == ["r1"]
    await engine.intake.on_chat_requested(request)  # once opened, a redelivery opens nothing
    assert len(engine.bus.sent) == 1 and engine.context.opened == 1


async def test_a_redelivery_submits_an_opened_turn_whose_first_step_never_took_its_lease(
    engine: _Engine,
) -> None:
    """The replica that opened the turn died after saving it ready to think, before its
    first step took the lease (it waited for a step slot): no lease expires, so no reaper
    takes it over. The redelivered request submits it (the lease decides: a step running
    on another replica keeps the turn); it does not open it again."""
    request = _request()
    await engine.intake.on_chat_requested(request)
    opened = await engine.store.load("r1")
    engine.scheduler.submitted.clear()  # that submit died with its replica
    await engine.intake.on_chat_requested(request)
    assert engine.scheduler.submitted == [("r1", opened)]
    assert len(engine.bus.sent) == 1 and engine.context.opened == 1


async def test_a_retried_handler_does_not_open_again_a_turn_whose_state_redis_lost(
    engine: _Engine,
) -> None:
    request = _request()
    await engine.intake.on_chat_requested(request)
    await engine.redis.flushdb()  # Redis emptied while the handler ran
    await engine.intake.on_chat_requested(request)  # the bus retries the handler
    # One turn_started (seq 1) only; the TurnAuditor ends the turn from Kafka's trail.
    assert [(type(e), e.seq) for e, _ in engine.bus.sent] == [(TurnStartedEvent, 1)]
    assert await engine.store.load("r1") is None and engine.context.opened == 1
