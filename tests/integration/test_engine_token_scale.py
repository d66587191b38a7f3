"""The engine's calibration scale (SPEC M-02) against the real memory routes on the real
PostgreSQL: measured in one turn, stored at its end, read back by the next turn."""

from __future__ import annotations

import secrets
import time
from collections.abc import AsyncIterator
from typing import Any, cast

import pytest
from fastapi import FastAPI
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from weft_context.tokens import TokenEstimator, message_text
from weft_contracts import AgentConfig
from weft_engine.context import ContextManager
from weft_engine.emitter import EventEmitter
from weft_engine.history_client import HistoryClient
from weft_engine.state import TurnState
from weft_engine.token_cache import CachedTokenEstimator
from weft_llm import Usage
from weft_memory.history_api import history_router
from weft_storage.memory.models import Message
from weft_testkit.credentials import trusted
from weft_testkit.function_model import FunctionModel, answer

from tests.integration.history_rows import seed_completed_turns

AGENT = AgentConfig(agent_id="a", model="m", memory_enabled=False)
EST = TokenEstimator()
RESULT = "Revenue by region and product line for the last four quarters. " * 40


@pytest.fixture
async def manager(sessions: async_sessionmaker[AsyncSession]) -> AsyncIterator[ContextManager]:
    app = FastAPI()
    app.include_router(history_router(sessions))
    client = HistoryClient("http://memory", transport=trusted(app))
    m = ContextManager(
        memory=client, model=FunctionModel(reply=lambda call: answer("unused")),
        emitter=cast(EventEmitter, None), estimator=CachedTokenEstimator(),
    )  # fmt: skip
    yield m
    await m.aclose()


async def _turn(manager: ContextManager, tenant: str, sid: str, ratio: float) -> TurnState:
    """A turn whose provider counts text ``ratio`` times cl100k: two requests, one tool round."""
    opening = await manager.opening(AGENT, tenant, sid, "u", "read it", {})
    state = TurnState(
        tenant_id=tenant, session_id=sid, request_id=f"req-{secrets.token_hex(4)}",
        user_id="u", agent=AGENT, messages=opening.messages, turn_ids=opening.turn_ids,
        token_scale=opening.token_scale, started_at=time.time(),
    )  # fmt: skip
    first = 2000
    state = manager.observe(state, Usage(prompt_tokens=first, completion_tokens=20))
    call = {"id": "c1", "type": "function", "function": {"name": "read", "arguments": "{}"}}
    added: list[dict[str, Any]] = [
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": RESULT},
    ]
    state = state.model_copy(update={"messages": [*state.messages, *added]})
    raw = sum(EST.raw_text_tokens(message_text(m)) for m in added)
    second = first + round(raw * ratio) + 3 * len(added)
    return manager.observe(state, Usage(prompt_tokens=second, completion_tokens=20))


async def test_scale_measured_in_a_turn_is_read_by_the_next_turn(
    manager: ContextManager, sessions: async_sessionmaker[AsyncSession]
) -> None:
    # SPEC M-02: persisted as context_token_scale; LoadAgentHistory gives it back
    tenant, sid = await seed_completed_turns(sessions, 2)
    state = await _turn(manager, tenant, sid, 1.25)
    assert state.scale_measured and abs(state.token_scale - 1.25) < 0.01
    await manager.persist_scale(state)
    async with sessions() as s:
        stored = await s.scalar(
            select(Message.context_token_scale).where(Message.id == f"{sid[-8:]}a1")
        )
    assert stored is not None and abs(stored - 1.25) < 0.01
    nxt = await manager.opening(AGENT, tenant, sid, "u", "next", {})
    assert nxt.token_scale == stored
    # the next turn measures again from that scale and overrides it
    again = await _turn(manager, tenant, sid, 0.8)
    assert again.token_scale != stored
    await manager.persist_scale(again)
    assert (await manager.opening(AGENT, tenant, sid, "u", "q", {})).token_scale == (
        again.token_scale
    )


async def test_a_new_session_starts_at_one(
    manager: ContextManager, sessions: async_sessionmaker[AsyncSession]
) -> None:
    # SPEC M-02: without a stored scale, the estimate is uncalibrated
    tenant, sid = await seed_completed_turns(sessions, 1)
    assert (await manager.opening(AGENT, tenant, sid, "u", "q", {})).token_scale == 1.0
