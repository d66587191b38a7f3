"""Read-your-writes for history (SPEC E-01, M-08) on the real PostgreSQL and Redis.

A session's next turn can start the moment the previous one emits ``complete`` (a queued
message, or a client that sends at once), before memory has recorded that ``complete``.
The engine's session gate names the previous turn; memory's history route waits for its
end to be stored (``after``), so the next turn's history holds it.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from redis.asyncio import Redis
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from weft_contracts import (
    AgentConfig,
    ChatRequested,
    ChatRequestedData,
    CompleteData,
    CompleteEvent,
    TurnStartedData,
    TurnStartedEvent,
    TurnStatus,
)
from weft_engine.sessions import SessionGate
from weft_memory.history_api import history_router
from weft_memory.recorder import MessageRecorder
from weft_testkit.credentials import trusted

WAIT_S = 3.0


@pytest.fixture
async def memory(
    sessions: async_sessionmaker[AsyncSession], redis: Redis
) -> AsyncIterator[httpx.AsyncClient]:
    app = FastAPI()
    app.include_router(history_router(sessions, redis, WAIT_S))
    transport = trusted(app)
    async with httpx.AsyncClient(transport=transport, base_url="http://memory") as client:
        yield client


def _turn(tenant: str, session: str) -> dict[str, Any]:
    return {"tenant_id": tenant, "session_id": session, "request_id": f"req_{secrets.token_hex(6)}"}


async def _start(recorder: MessageRecorder, ids: dict[str, Any], query: str) -> None:
    data = TurnStartedData(query=query, user_id="u1", agent_id="a")
    await recorder.handle(TurnStartedEvent(**ids, seq=1, data=data))


def _complete(ids: dict[str, Any], answer: str) -> CompleteEvent:
    data = CompleteData(status=TurnStatus.COMPLETED, final_answer=answer)
    return CompleteEvent(**ids, seq=3, data=data)


async def _history(
    memory: httpx.AsyncClient, ids: dict[str, Any], after: str | None
) -> dict[str, Any]:
    params = {"tenant_id": ids["tenant_id"], "token_budget": 10_000}
    if after is not None:
        params["after"] = after
    resp = await memory.get(f"/internal/sessions/{ids['session_id']}/history", params=params)
    assert resp.status_code == 200, resp.text
    return dict(resp.json())


async def _blocked_clients(redis: Redis) -> int:
    """Redis clients blocked in a command such as the history route's BLMOVE."""
    return int((await redis.info("clients"))["blocked_clients"])


async def test_history_waits_for_the_end_of_the_turn_it_is_told_about(
    sessions: async_sessionmaker[AsyncSession], redis: Redis, memory: httpx.AsyncClient
) -> None:
    recorder = MessageRecorder(sessions, redis)
    tenant, session = f"t-{secrets.token_hex(4)}", f"ses_{secrets.token_hex(6)}"
    first = _turn(tenant, session)
    await _start(recorder, first, "first question")
    # Without ``after`` the history is built at once: the running turn is not in it.
    assert (await _history(memory, first, None))["messages"] == []

    blocked = await _blocked_clients(redis)
    asking = asyncio.create_task(_history(memory, first, first["request_id"]))
    async with asyncio.timeout(10):  # the request is waiting on the turn-end signal
        while True:
            if await _blocked_clients(redis) > blocked or asking.done():
                break
            await asyncio.sleep(0.02)
    assert not asking.done(), "history answered before the previous turn's end was stored"
    await recorder.handle(_complete(first, "first answer"))
    body = await asyncio.wait_for(asking, WAIT_S)
    assert body["previous_turn_stored"] is True
    contents = [(m["role"], m["content"]) for m in body["messages"]]
    assert contents == [("user", "first question"), ("assistant", "first answer")]

    # Stored already (the database says so; the signal is not needed): no wait at all.
    await redis.delete(f"weft:memory:turn-ended:{first['request_id']}")
    again = await asyncio.wait_for(_history(memory, first, first["request_id"]), 1.0)
    assert again["previous_turn_stored"] is True and len(again["messages"]) == 2


async def test_history_gives_up_waiting_and_says_so(
    sessions: async_sessionmaker[AsyncSession], redis: Redis, memory: httpx.AsyncClient
) -> None:
    recorder = MessageRecorder(sessions, redis)
    ids = _turn(f"t-{secrets.token_hex(4)}", f"ses_{secrets.token_hex(6)}")
    await _start(recorder, ids, "a question whose turn never ends")
    body = await asyncio.wait_for(_history(memory, ids, ids["request_id"]), WAIT_S + 2)
    assert body["previous_turn_stored"] is False
    assert body["messages"] == []


def _request(tenant: str, session: str) -> ChatRequested:
    data = ChatRequestedData(query="q", user_id="u1", agent=AgentConfig(agent_id="a", model="m"))
    return ChatRequested(**_turn(tenant, session), data=data)


async def test_the_session_gate_names_the_previous_turn_and_hands_over_atomically(
    redis: Redis,
) -> None:
    tenant, session = f"t-{secrets.token_hex(4)}", f"ses_{secrets.token_hex(6)}"
    starts = f"weft:test:{tenant}:starts"
    gate = SessionGate(redis, 60, starts_key=starts)
    first, second, third = (_request(tenant, session) for _ in range(3))

    claim = await gate.claim(tenant, session, first.request_id)
    assert claim.holder is None and claim.previous is None  # a new session
    assert (await gate.claim(tenant, session, first.request_id)).holder is None  # redelivery
    assert (await gate.claim(tenant, session, second.request_id)).holder == first.request_id
    await gate.enqueue(second)

    # The first turn ends: the queued one runs in the session at once, so a third message
    # finds it busy instead of starting beside it.
    handed = await gate.hand_over(tenant, session, first.request_id)
    assert handed is not None and handed.request.request_id == second.request_id
    assert handed.previous == first.request_id
    assert await redis.zcard(starts) == 1  # a pending start until its turn is open
    await gate.started(handed)
    assert await redis.zcard(starts) == 0
    assert await gate.active(tenant, session) == second.request_id
    assert (await gate.claim(tenant, session, third.request_id)).holder == second.request_id

    # A turn that no longer holds the session changes nothing.
    assert await gate.hand_over(tenant, session, first.request_id) is None
    assert await gate.active(tenant, session) == second.request_id

    assert await gate.hand_over(tenant, session, second.request_id) is None
    assert await gate.active(tenant, session) is None
    claim = await gate.claim(tenant, session, third.request_id)
    assert claim.holder is None and claim.previous == second.request_id
