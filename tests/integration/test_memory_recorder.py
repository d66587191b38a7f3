"""MessageRecorder on the real PostgreSQL and Redis: idempotent persistence, incomplete
turns stay out of history, a stopped turn keeps its partially streamed answer."""

from __future__ import annotations

import json
import secrets
from typing import Any

from redis.asyncio import Redis
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from weft_contracts import (
    AgentStep,
    CompleteData,
    CompleteEvent,
    FinalAnswerData,
    FinalAnswerEvent,
    StepToolCall,
    TurnStartedData,
    TurnStartedEvent,
    TurnStatus,
)
from weft_memory.history import HistoryLoader, HistoryQuery
from weft_memory.recorder import MessageRecorder, partial_key
from weft_storage.memory.models import Message


def _ids() -> dict[str, Any]:
    return {
        "tenant_id": f"t-{secrets.token_hex(4)}",
        "session_id": f"ses_{secrets.token_hex(6)}",
        "request_id": f"req_{secrets.token_hex(6)}",
    }


def _started(ids: dict[str, Any]) -> TurnStartedEvent:
    data = TurnStartedData(query="what is the refund policy?", user_id="u1", agent_id="a")
    return TurnStartedEvent(**ids, seq=1, data=data)


def _complete(ids: dict[str, Any], status: TurnStatus, answer: str, seq: int) -> CompleteEvent:
    step = AgentStep(round=0, tool_calls=[StepToolCall(
        call_id="c1", tool_name="database_query", arguments={"sql": "select 1"},
        success=True, output="1",
    )])  # fmt: skip
    data = CompleteData(status=status, final_answer=answer, steps=[step], duration_ms=42)
    return CompleteEvent(**ids, seq=seq, data=data)


async def _rows(sessions: async_sessionmaker[AsyncSession], request_id: str) -> list[Message]:
    async with sessions() as s:
        stmt = select(Message).where(Message.request_id == request_id).order_by(Message.role)
        return list((await s.scalars(stmt)).all())


async def test_redelivered_events_change_nothing(
    sessions: async_sessionmaker[AsyncSession], redis: Redis
) -> None:
    recorder = MessageRecorder(sessions, redis)
    ids = _ids()
    started, complete = _started(ids), _complete(ids, TurnStatus.COMPLETED, "Thirty days.", 5)
    for event in (started, complete, started, complete):
        await recorder.handle(event)
    assistant, user = await _rows(sessions, ids["request_id"])
    assert user.content == "what is the refund policy?"
    assert assistant.content == "Thirty days." and assistant.is_completed
    assert assistant.agent_steps[0]["tool_calls"][0]["output"] == "1"
    assert assistant.duration_ms == 42 and not assistant.is_partial
    history = await HistoryLoader(sessions).build(
        ids["tenant_id"], ids["session_id"], HistoryQuery(token_budget=10_000)
    )
    assert [m["role"] for m in history.messages] == ["user", "assistant", "tool", "assistant"]


async def test_turn_without_complete_stays_out_of_history(
    sessions: async_sessionmaker[AsyncSession], redis: Redis
) -> None:
    recorder = MessageRecorder(sessions, redis)
    ids = _ids()
    await recorder.handle(_started(ids))
    assistant, _ = await _rows(sessions, ids["request_id"])
    assert not assistant.is_completed and assistant.status == "running"
    history = await HistoryLoader(sessions).build(
        ids["tenant_id"], ids["session_id"], HistoryQuery(token_budget=10_000)
    )
    assert history.messages == []


async def test_stopped_turn_keeps_partial_answer(
    sessions: async_sessionmaker[AsyncSession], redis: Redis
) -> None:
    recorder = MessageRecorder(sessions, redis)
    ids = _ids()
    await recorder.handle(_started(ids))
    deltas = [(2, 0, "Let me look."), (4, 1, "Refunds are "), (5, 1, "possible within ")]
    for seq, rnd, text in deltas:
        event = FinalAnswerEvent(**ids, seq=seq, data=FinalAnswerData(round=rnd, delta=text))
        await recorder.handle(event)
        await recorder.handle(event)  # re-delivered delta
    cancelled = _complete(ids, TurnStatus.CANCELLED, "", 6)
    await recorder.handle(cancelled)
    assistant, _ = await _rows(sessions, ids["request_id"])
    assert assistant.content == "Refunds are possible within "  # the last round only
    assert assistant.is_partial and assistant.status == "cancelled"
    assert not assistant.is_completed
    assert not await redis.exists(partial_key(ids["request_id"]))
    await recorder.handle(cancelled)  # re-delivered after the deltas are gone
    assistant, _ = await _rows(sessions, ids["request_id"])
    assert assistant.content == "Refunds are possible within " and assistant.is_partial


async def test_nul_and_lone_surrogates_from_a_model_or_tool_do_not_lose_the_turn(
    sessions: async_sessionmaker[AsyncSession], redis: Redis
) -> None:
    """A model's answer, a tool's output or the model's tool arguments with NUL or a lone
    surrogate: PostgreSQL text/jsonb cannot hold either and UTF-8 cannot encode a lone
    surrogate, so the events are cleaned when built (NUL dropped, lone surrogates ->
    U+FFFD), publish, decode and are stored whole. A NUL escape sent by some other
    producer is cleaned when memory decodes it."""
    recorder = MessageRecorder(sessions, redis)
    ids = _ids()
    started = _started(ids).model_dump()
    started["data"]["query"] = "refund\x00 policy\ud800?"
    wire = _complete(ids, TurnStatus.COMPLETED, "Thirty\x00 days\udfff.", 5).model_dump()
    step = wire["data"]["steps"][0]
    step["thought"] = "Let me\x00 check"
    step["tool_calls"][0].update(arguments={"sql\x00": "select '\ud800'"}, output="page\x00 1")
    for event in (TurnStartedEvent.model_validate(started), CompleteEvent.model_validate(wire)):
        published = event.model_dump_json()  # what the bus sends; raised before cleaning
        await recorder.handle(type(event).model_validate_json(published))
    assistant, user = await _rows(sessions, ids["request_id"])
    assert user.content == "refund policy\ufffd?"
    assert assistant.content == "Thirty days\ufffd." and assistant.is_completed
    stored = assistant.agent_steps[0]
    assert stored["thought"] == "Let me check"
    assert stored["tool_calls"][0]["arguments"] == {"sql": "select '\ufffd'"}
    assert stored["tool_calls"][0]["output"] == "page 1"

    foreign = json.loads(_complete(ids, TurnStatus.COMPLETED, "x", 6).model_dump_json())
    foreign["data"]["final_answer"] = "Thirty\x00 one"  # json.dumps writes "\u0000"
    await recorder.handle(CompleteEvent.model_validate_json(json.dumps(foreign)))
    assistant, _ = await _rows(sessions, ids["request_id"])
    assert assistant.content == "Thirty one"


async def test_a_stop_after_a_steer_keeps_only_the_live_rounds_text(
    sessions: async_sessionmaker[AsyncSession], redis: Redis
) -> None:  # SPEC E-13, E-20
    """The superseded marker drops the steered round's deltas, even when the next round
    has not streamed anything yet."""
    recorder = MessageRecorder(sessions, redis)
    ids = _ids()
    await recorder.handle(_started(ids))
    steered = FinalAnswerEvent(**ids, seq=2, data=FinalAnswerData(round=0, delta="Fly there."))
    marker = FinalAnswerData(round=0, delta="", done=True, superseded=True)
    for event in (steered, FinalAnswerEvent(**ids, seq=3, data=marker)):
        await recorder.handle(event)
    await recorder.handle(_complete(ids, TurnStatus.CANCELLED, "", 4))
    assistant, _ = await _rows(sessions, ids["request_id"])
    assert assistant.content == "" and not assistant.is_partial

    ids = _ids()
    await recorder.handle(_started(ids))
    live = FinalAnswerEvent(**ids, seq=4, data=FinalAnswerData(round=1, delta="Take a train"))
    for event in (
        FinalAnswerEvent(**ids, seq=2, data=FinalAnswerData(round=0, delta="Fly there.")),
        FinalAnswerEvent(**ids, seq=3, data=marker),
        live,
    ):
        await recorder.handle(event)
    await recorder.handle(_complete(ids, TurnStatus.CANCELLED, "", 5))
    assistant, _ = await _rows(sessions, ids["request_id"])
    assert assistant.content == "Take a train" and assistant.is_partial
