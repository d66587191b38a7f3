"""A replica killed between recording a tool result and publishing its events leaves no
hole in the turn's seqs (invariant 1, SPEC E-04, E-18), on the real Redis and Kafka.

The killed replica's write saved the result and reserved its ``tool_result`` seq, and
stored the event in the turn's outbox; its publish never happened. Whoever reserves the
turn's next seq publishes that event first, at its seq: the recorder of the round's other
result, or the takeover's catch-up (which then gives no seq back). Kafka holds the turn's
events at seqs 1..N in order, the lost ``tool_result`` once, with the envelope id the
killed replica stored.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import AsyncIterator
from typing import Any, cast

import pytest
from redis.asyncio import Redis
from weft_contracts import (
    AgentConfig,
    CompleteData,
    ThoughtData,
    ThoughtEvent,
    ToolCallCompleted,
    ToolCallCompletedData,
    Topic,
    TurnStatus,
)
from weft_engine.emitter import EventEmitter
from weft_engine.keys import outbox_holder_key, outbox_key, seq_key
from weft_engine.leases import TurnLeases
from weft_engine.reporting import ResultReporter
from weft_engine.state import PendingCall, TurnState, TurnStore
from weft_engine.takeover import catch_up
from weft_engine.trails import KafkaTurnTrails
from weft_platform.bus import EventBus
from weft_platform.runtime import ServiceRuntime

from tests.integration.kafka_helpers import read_topic, service_runtime

HOLD_MS = 300
"""The killed replica's hold: how long the others wait before they take its events."""


class _Killed(Exception):
    """The replica died right after its write."""


class _KilledAfterTheWrite(EventEmitter):
    """A replica's emitter that dies between the recording write and the publish (it
    never reaches Kafka: no bus)."""

    async def queue_outboxed(self, envelopes: list[Any], seqs: range) -> None:
        raise _Killed


@pytest.fixture
async def runtime(infra: dict[str, str]) -> AsyncIterator[ServiceRuntime]:
    """The engine's bus on the real Kafka (topics of its own)."""
    async with service_runtime(infra, "engine-outbox", start=True) as rt:
        yield rt


async def _waiting_turn(redis: Redis, *call_ids: str) -> TurnState:
    """A turn that dispatched ``call_ids`` as one group and waits for their results."""
    state = TurnState(
        tenant_id="t", session_id=f"s_{secrets.token_hex(4)}",
        request_id=f"req_{secrets.token_hex(6)}", user_id="u",
        agent=AgentConfig(agent_id="a", model="m", allowed_tools=["thinking"]),
        messages=[{"role": "user", "content": "Plan my trip."}], started_at=time.time(),
        phase="waiting", groups=[list(call_ids)], dispatched_groups=1,
        pending=[PendingCall(call_id=c, tool_name="thinking", arguments={}, arguments_json="{}")
                 for c in call_ids],
    )  # fmt: skip
    return await TurnStore(redis, ttl_s=60).save(state)


def _result(state: TurnState, call_id: str) -> ToolCallCompleted:
    return ToolCallCompleted(
        tenant_id="t", session_id=state.session_id, request_id=state.request_id,
        data=ToolCallCompletedData(call_id=call_id, tool_name="thinking", success=True,
                                   output=f"noted by {call_id}"),
    )  # fmt: skip


async def _opened(emitter: EventEmitter, state: TurnState) -> None:
    """The turn's events before the round's results (seq 1), acked."""
    await emitter.emit(ThoughtEvent, state.ids(), ThoughtData(round=0, delta="Checking."))


async def _killed_recording(redis: Redis, state: TurnState, call_id: str, **lease: Any) -> str:
    """A replica records ``call_id``'s result and dies before publishing: the id of the
    ``tool_result`` envelope its write left in the outbox."""
    store = TurnStore(redis, ttl_s=60)
    killed = _KilledAfterTheWrite(cast(EventBus, None), redis, ttl_s=60, hold_ms=HOLD_MS)
    with pytest.raises(_Killed):
        await ResultReporter(store, killed).record(_result(state, call_id), **lease)
    recorded = await store.load(state.request_id)
    assert recorded is not None and call_id in recorded.results, "the state has the result"
    [raw] = (await redis.hgetall(outbox_key(state.request_id))).values()
    return str(json.loads(raw)["id"])


async def _turn_events(runtime: ServiceRuntime, request_id: str) -> list[dict[str, Any]]:
    """The turn's agent events as Kafka has them (in log order), up to its ``complete``."""

    def completed(events: list[dict[str, Any]]) -> bool:
        return any(e["type"] == "complete" and e["request_id"] == request_id for e in events)

    events = await read_topic(runtime, Topic.AGENT_EVENTS, completed)
    return [e for e in events if e["request_id"] == request_id]


def _assert_no_hole(events: list[dict[str, Any]], lost_id: str) -> None:
    seqs = [e["seq"] for e in events]
    assert seqs == list(range(1, len(seqs) + 1)), seqs
    lost = [e for e in events if e["id"] == lost_id]
    assert len(lost) == 1 and lost[0]["type"] == "tool_result", [e["type"] for e in events]


async def test_the_next_recorder_publishes_the_killed_recorders_result_first(
    redis: Redis, runtime: ServiceRuntime
) -> None:
    """The round's two results were recorded on two replicas; the first one died after its
    write. The second one's write waits out the dead one's hold, publishes its
    ``tool_result`` at seq 2, then reserves seq 3 for its own."""
    state = await _waiting_turn(redis, "c1", "c2")
    rid = state.request_id
    emitter = EventEmitter(runtime.bus, redis, ttl_s=60)
    await _opened(emitter, state)
    lost_id = await _killed_recording(redis, state, "c1")

    leases = TurnLeases(redis, owner="r2", namespace=f"t{secrets.token_hex(4)}.", ttl_s=6)
    recorded = await ResultReporter(TurnStore(redis, ttl_s=60), emitter).record(
        _result(state, "c2"), leases.lease_request(rid)
    )
    assert recorded is not None and recorded.claim is not None
    assert recorded.state.tools_answered()
    await emitter.flush(rid)
    await emitter.complete(state.ids(), CompleteData(status=TurnStatus.COMPLETED))

    events = await _turn_events(runtime, rid)
    _assert_no_hole(events, lost_id)
    results = [e["data"]["call_id"] for e in events if e["type"] == "tool_result"]
    assert results == ["c1", "c2"]
    assert not await redis.exists(outbox_key(rid), outbox_holder_key(rid)), "all acked"


async def test_a_takeover_publishes_the_killed_recorders_result_and_gives_no_seq_back(
    redis: Redis, runtime: ServiceRuntime
) -> None:
    """The dead replica recorded the round's last result and took the step's lease in the
    same write: the takeover's catch-up publishes the result at its reserved seq before it
    counts on from Kafka, so the turn's next event follows it."""
    state = await _waiting_turn(redis, "c1")
    rid = state.request_id
    emitter = EventEmitter(runtime.bus, redis, ttl_s=60)
    await _opened(emitter, state)
    dead = TurnLeases(redis, owner="r1", namespace=f"t{secrets.token_hex(4)}.", ttl_s=6)
    lost_id = await _killed_recording(redis, state, "c1", lease=dead.lease_request(rid))
    assert await redis.get(seq_key(rid)) == b"2"

    recorded = await TurnStore(redis, ttl_s=60).load(rid)
    assert recorded is not None and recorded.tools_answered()
    trails = KafkaTurnTrails(
        runtime.settings, runtime.bus.topic_name(Topic.AGENT_EVENTS), margin_s=60
    )
    await catch_up(trails, emitter, recorded)
    assert await redis.get(seq_key(rid)) == b"2", "no seq given back"
    await emitter.complete(state.ids(), CompleteData(status=TurnStatus.COMPLETED))

    _assert_no_hole(await _turn_events(runtime, rid), lost_id)
