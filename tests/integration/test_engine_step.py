"""One step of a turn on the real Redis, with a scripted in-process model: a steer message
that waits when the tools' results come back joins the next LLM call; when none waits, the
step does not poll the inbox before thinking (SPEC E-13, issue 3)."""

from __future__ import annotations

import asyncio
import secrets
import time
from typing import Any

from redis.asyncio import Redis
from weft_context import MemoryClient
from weft_contracts import AgentConfig, Envelope, ToolCallCompletedData, Topic
from weft_engine.context import ContextManager
from weft_engine.emitter import EventEmitter
from weft_engine.finalize import Finisher
from weft_engine.leases import TurnLeases
from weft_engine.loop import TurnLoop
from weft_engine.reporting import ResultReporter
from weft_engine.sessions import SessionGate, SteerInbox
from weft_engine.state import PendingCall, TurnState, TurnStore
from weft_engine.think import ThinkSettings
from weft_engine.token_cache import CachedTokenEstimator
from weft_llm import LLMRequest, LLMResponse, StreamSink


class _Bus:
    """Acks every event at once; keeps what was published."""

    def __init__(self) -> None:
        self.sent: list[Envelope] = []

    async def publish(self, topic: Topic, message: Envelope) -> None:
        self.sent.append(message)

    async def publish_nowait(self, topic: Topic, message: Envelope) -> asyncio.Future[Any]:
        self.sent.append(message)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        future.set_result(None)
        return future


class _Model:
    """Answers every call with a short text and remembers the messages it was sent."""

    def __init__(self) -> None:
        self.requests: list[LLMRequest] = []

    async def stream(self, request: LLMRequest, sink: StreamSink) -> LLMResponse:
        self.requests.append(request)
        await sink.on_content("Done.")
        return LLMResponse(content="Done.", reasoning="", tool_calls=[], finish_reason="stop")


class _CountingInbox(SteerInbox):
    def __init__(self, redis: Redis, ttl_s: int) -> None:
        super().__init__(redis, ttl_s)
        self.polls = 0

    async def poll(self, request_id: str, cancel_key: str) -> tuple[bool, list[str]]:
        self.polls += 1
        return await super().poll(request_id, cancel_key)


def _loop(redis: Redis, model: _Model, inbox: SteerInbox, bus: _Bus) -> TurnLoop:
    store = TurnStore(redis, ttl_s=60)
    emitter = EventEmitter(bus, redis, ttl_s=60)  # type: ignore[arg-type]
    leases = TurnLeases(redis, owner="r1", namespace=f"t{secrets.token_hex(4)}.", ttl_s=6)
    context = ContextManager(
        memory=MemoryClient(base_url="http://127.0.0.1:9"), model=model, emitter=emitter,
        estimator=CachedTokenEstimator(),
    )  # fmt: skip
    finisher = Finisher(
        emitter=emitter, store=store, leases=leases, sessions=SessionGate(redis, 60)
    )
    return TurnLoop(
        bus=bus, redis=redis, store=store, emitter=emitter, model=model, finisher=finisher,  # type: ignore[arg-type]
        reporter=ResultReporter(store, emitter), inbox=inbox, leases=leases, context=context,
        think_settings=ThinkSettings(), tool_timeout_s=60,
    )  # fmt: skip


async def _waiting_turn(redis: Redis) -> TurnState:
    """A turn whose only tool call has its result: the next step observes and thinks."""
    state = TurnState(
        tenant_id="t", session_id=f"s_{secrets.token_hex(4)}",
        request_id=f"req_{secrets.token_hex(6)}", user_id="u",
        agent=AgentConfig(agent_id="a", model="m", allowed_tools=["thinking"]),
        messages=[{"role": "user", "content": "Plan my trip."}], started_at=time.time(),
        phase="waiting", groups=[["c1"]], dispatched_groups=1,
        pending=[PendingCall(call_id="c1", tool_name="thinking", arguments={},
                             arguments_json="{}")],
        results={"c1": ToolCallCompletedData(call_id="c1", tool_name="thinking", success=True,
                                             output="noted")},
    )  # fmt: skip
    return await TurnStore(redis, ttl_s=60).save(state)


async def test_a_steer_waiting_when_results_arrive_joins_the_next_llm_call(redis: Redis) -> None:
    """SPEC E-13: the steer sent while the tools ran is the last message the model reads."""
    model, inbox, bus = _Model(), _CountingInbox(redis, 60), _Bus()
    state = await _waiting_turn(redis)
    await inbox.put(state.request_id, "Also check the train prices.")
    await _loop(redis, model, inbox, bus).run_step(state.request_id, False)
    sent = model.requests[0].messages
    assert [m["role"] for m in sent[-3:]] == ["assistant", "tool", "user"]
    assert sent[-1]["content"] == "Also check the train prices."
    assert inbox.polls == 1
    assert [e.type for e in bus.sent][-1] == "complete"


async def test_without_a_waiting_steer_the_step_thinks_without_polling(redis: Redis) -> None:
    """Issue 3: the step's load already saw no stop flag and an empty inbox."""
    model, inbox, bus = _Model(), _CountingInbox(redis, 60), _Bus()
    state = await _waiting_turn(redis)
    await _loop(redis, model, inbox, bus).run_step(state.request_id, False)
    assert inbox.polls == 0
    assert model.requests[0].messages[-1]["role"] == "tool"
    assert [e.type for e in bus.sent][-1] == "complete"
