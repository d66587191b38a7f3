"""The engine's per-tenant turn cap (TurnCap) on an in-memory Redis with Lua: a turn over
its tenant's cap is kept as a pending start (not dropped, not opened) and opens when
another of its tenant's turns ends; deferred starts go round-robin by tenant; every end of
a turn gives its slot back; a slot that nobody gives back (its replica was killed) comes
back once its lease runs out."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, cast

import pytest
from fakeredis import FakeAsyncRedis, FakeServer
from weft_contracts import (
    AgentConfig,
    ChatRequested,
    ChatRequestedData,
    Envelope,
    ErrorCode,
    Topic,
    TurnStartedEvent,
)
from weft_engine import intake as intake_module
from weft_engine.context import ContextManager
from weft_engine.emitter import EventEmitter
from weft_engine.finalize import Finisher, TurnFailure
from weft_engine.intake import TurnIntake
from weft_engine.leases import TurnLeases
from weft_engine.outcomes import Answer
from weft_engine.parked_images import ParkedImages
from weft_engine.reporting import ResultReporter
from weft_engine.scheduler import StepScheduler
from weft_engine.sessions import SessionGate, SteerInbox
from weft_engine.state import TurnState, TurnStore
from weft_engine.turn_cap import TurnCap, round_robin
from weft_platform.bus import EventBus

STARTS = "weft:t.engine:starts"


@dataclass
class _Bus:
    sent: list[Envelope] = field(default_factory=list)

    async def publish(self, topic: Topic, message: Envelope) -> None:
        self.sent.append(message)

    async def publish_nowait(self, topic: Topic, message: Envelope) -> asyncio.Future[Any]:
        await self.publish(topic, message)
        done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done

    def opened(self) -> list[str]:
        return [m.request_id for m in self.sent if isinstance(m, TurnStartedEvent)]


class _Context:
    async def opening(self, *_: Any, **__: Any) -> tuple[list[dict[str, Any]], list[str], float]:
        return [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}], [], 1.0


class _Scheduler:
    async def submit(self, request_id: str, **_: Any) -> bool:
        return True


@dataclass
class _Engine:
    intake: TurnIntake
    finisher: Finisher
    store: TurnStore
    bus: _Bus
    cap: TurnCap
    redis: FakeAsyncRedis

    async def end(self, request_id: str) -> None:
        state = await self.store.load(request_id)
        assert state is not None, request_id
        await self.finisher.answer(state, Answer(text="done"))


def _engine(
    cap: int, *, deadline_s: float = 1200, margin_s: float = 60, server: FakeServer | None = None
) -> _Engine:
    redis = FakeAsyncRedis(server=server or FakeServer())
    store = TurnStore(redis, 600)
    bus = _Bus()
    emitter = EventEmitter(cast(EventBus, bus), redis, ttl_s=600)
    leases = TurnLeases(redis, owner="e1", namespace="t.", ttl_s=3)
    sessions = SessionGate(redis, 600, starts_key=STARTS)
    turn_cap = TurnCap(
        redis, "t.engine:turns", cap=cap, turn_deadline_s=deadline_s, margin_s=margin_s
    )
    finisher = Finisher(emitter=emitter, store=store, leases=leases, sessions=sessions,
                        cap=turn_cap)  # fmt: skip
    intake = TurnIntake(
        redis=redis, store=store, emitter=emitter, context=cast(ContextManager, _Context()),
        sessions=sessions, inbox=SteerInbox(redis, 600),
        reporter=ResultReporter(store, emitter), finisher=finisher,
        scheduler=cast(StepScheduler, _Scheduler()), cancel_channel="c", ttl_s=600,
        images=ParkedImages(redis, 600), turn_deadline_s=deadline_s, cap=turn_cap,
    )  # fmt: skip
    return _Engine(intake, finisher, store, bus, turn_cap, redis)


@pytest.fixture(autouse=True)
def _due_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Deferred starts are due at once (the sweep is what the tests drive)."""
    monkeypatch.setattr(intake_module, "DEFER_S", 0.0)


def _request(tenant: str, rid: str) -> ChatRequested:
    data = ChatRequestedData(query="q", user_id="u1", agent=AgentConfig(agent_id="a", model="m"))
    return ChatRequested(tenant_id=tenant, session_id=f"s-{rid}", request_id=rid, data=data)


async def test_a_turn_over_its_tenants_cap_waits_and_opens_when_another_ends() -> None:
    engine = _engine(cap=2)
    b3 = _request("tb", "b3")
    for request in (_request("tb", "b1"), _request("tb", "b2"), b3):
        await engine.intake.on_chat_requested(request)
    await engine.intake.on_chat_requested(_request("tc", "c1"))
    # b3 is over B's cap: not opened, kept in Redis, its session claimed for it.
    assert engine.bus.opened() == ["b1", "b2", "c1"]
    assert await engine.redis.zcard(STARTS) == 1
    assert await engine.redis.get("weft:session:tb:s-b3:active") == b"b3"
    assert await engine.cap.held("tb") == 2
    await engine.intake.start_due()  # still at the cap: it stays pending
    assert engine.bus.opened() == ["b1", "b2", "c1"]
    assert await engine.redis.zcard(STARTS) == 1
    await engine.intake.on_chat_requested(b3)  # a redelivery: kept once
    assert await engine.redis.zcard(STARTS) == 1

    await engine.end("b1")
    assert engine.cap.freed.is_set()  # wakes this replica's retry_starts
    await engine.intake.start_due()
    assert engine.bus.opened() == ["b1", "b2", "c1", "b3"]
    assert await engine.redis.zcard(STARTS) == 0
    assert await engine.cap.held("tb") == 2


async def test_a_slot_given_back_on_one_replica_wakes_the_others_sweep() -> None:
    """Replica 2's pending-start sweep wakes when replica 1 gives a slot back (pub/sub),
    not at its next interval."""
    server = FakeServer()
    one, two = _engine(cap=1, server=server), _engine(cap=1, server=server)
    listening = asyncio.create_task(two.intake.listen_for_cancels())
    try:
        await one.intake.on_chat_requested(_request("tb", "b1"))
        for _ in range(500):  # the listener has subscribed
            if (await one.redis.pubsub_numsub(one.cap.channel))[0][1]:
                break
            await asyncio.sleep(0.01)
        assert not two.cap.freed.is_set()
        await one.end("b1")
        async with asyncio.timeout(2):
            await two.cap.freed.wait()
    finally:
        listening.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await listening


async def test_deferred_starts_open_round_robin_by_tenant() -> None:
    engine = _engine(cap=2)
    flood = [f"a{i}" for i in range(1, 7)]
    for rid in flood:
        await engine.intake.on_chat_requested(_request("ta", rid))
    for rid in ("b1", "b2", "b3", "b4"):
        await engine.intake.on_chat_requested(_request("tb", rid))
    assert engine.bus.opened() == ["a1", "a2", "b1", "b2"]
    for rid in ("a1", "a2", "b1", "b2"):
        await engine.end(rid)
    await engine.intake.start_due()
    # Due in the order a3..a6, b3, b4; B's first waits behind one of A's, not four.
    assert engine.bus.opened()[4:] == ["a3", "b3", "a4", "b4"]
    assert await engine.redis.zcard(STARTS) == 2  # a5, a6: A is at its cap again


def test_round_robin_keeps_each_tenants_order() -> None:
    items = ["a1", "a2", "a3", "b1", "c1", "b2"]
    assert round_robin(items, lambda s: s[0]) == ["a1", "b1", "c1", "a2", "b2", "a3"]


def _failure(code: ErrorCode) -> TurnFailure:
    return TurnFailure(code=code, message="m")


END_REASONS: dict[str, Callable[[Finisher, TurnState], Awaitable[None]]] = {
    "answer": lambda f, s: f.answer(s, Answer(text="x")),
    "failure": lambda f, s: f.fail(s, _failure(ErrorCode.LLM_ERROR)),
    "deadline": lambda f, s: f.fail(s, _failure(ErrorCode.TURN_DEADLINE_EXCEEDED)),
    "stop": lambda f, s: f.cancelled(s),
    "forgotten": lambda f, s: f.forget(s),
}


@pytest.mark.parametrize("reason", list(END_REASONS))
async def test_every_end_of_a_turn_gives_its_slot_back(reason: str) -> None:
    engine = _engine(cap=1)
    await engine.intake.on_chat_requested(_request("tb", "b1"))
    await engine.intake.on_chat_requested(_request("tb", "b2"))
    assert engine.bus.opened() == ["b1"]
    state = await engine.store.load("b1")
    assert state is not None
    await END_REASONS[reason](engine.finisher, state)
    assert await engine.cap.held("tb") == 0
    await engine.intake.start_due()
    assert engine.bus.opened() == ["b1", "b2"]


async def test_the_slot_of_a_killed_replicas_turn_comes_back_after_its_lease() -> None:
    engine = _engine(cap=1, deadline_s=0.5, margin_s=0.5)  # a lease of 1 s
    await engine.intake.on_chat_requested(_request("tb", "b1"))  # its replica dies: no end
    await engine.intake.on_chat_requested(_request("tb", "b2"))
    await engine.intake.start_due()
    assert engine.bus.opened() == ["b1"]
    until = time.monotonic() + 10
    while engine.bus.opened() == ["b1"] and time.monotonic() < until:
        await asyncio.sleep(0.2)
        await engine.intake.start_due()
    assert engine.bus.opened() == ["b1", "b2"]


async def test_no_cap_opens_every_turn() -> None:
    engine = _engine(cap=0)
    for i in range(5):
        await engine.intake.on_chat_requested(_request("tb", f"b{i}"))
    assert len(engine.bus.opened()) == 5
    assert await engine.redis.zcard(STARTS) == 0
