"""The engine's HistoryClient against the real memory routes on the real
PostgreSQL: history -> compaction -> checkpoint -> reload from it; scale; recall/extract."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from fastapi import FastAPI
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from weft_context.tokens import TokenEstimator
from weft_engine.compaction import CompactionSettings, Compactor
from weft_engine.history_client import HistoryClient
from weft_memory.api import session_router
from weft_memory.extraction import MemoryExtractor
from weft_memory.history_api import history_router
from weft_memory.longterm import LongTermMemory
from weft_memory.memory_api import memory_router
from weft_testkit.credentials import trusted
from weft_testkit.function_model import FunctionModel, ModelCall, Reply, answer

from tests.integration.history_rows import seed_completed_turns
from tests.workspaces_kit import sandbox_workspaces


def _model() -> FunctionModel:
    """Answers summaries and extractions."""

    def reply(call: ModelCall) -> Reply:
        summary = "<transcript>" in call.last_message["content"]
        return answer("SUMMARY" if summary else '["The user likes long answers."]')

    return FunctionModel(reply=reply)


@pytest.fixture
async def client(sessions: async_sessionmaker[AsyncSession]) -> AsyncIterator[HistoryClient]:
    memory = LongTermMemory(sessions)
    app = FastAPI()
    app.include_router(session_router(sessions, sandbox_workspaces(sessions)))
    app.include_router(history_router(sessions))
    app.include_router(
        memory_router(sessions, memory, MemoryExtractor(sessions, _model(), "m", memory))
    )
    c = HistoryClient("http://memory", transport=trusted(app))
    yield c
    await c.aclose()


async def test_engine_flow_through_the_client(
    client: HistoryClient, sessions: async_sessionmaker[AsyncSession]
) -> None:
    tenant, sid = await seed_completed_turns(sessions, 6, answer="long " * 1500)
    settings = CompactionSettings(model="m", context_window=24_000, completion_budget=512)
    history = await client.history(tenant, sid, token_budget=settings.context_window)
    assert len(history.messages) == 12 and history.turn_ids[0] == f"{sid[-8:]}a0"
    messages, turn_ids = history.with_prefix(
        [{"role": "system", "content": "sys"}], [{"role": "user", "content": "now?"}]
    )
    result = await Compactor(_model(), settings, TokenEstimator()).compact(messages, turn_ids)
    assert result.compacted and result.checkpoint is not None
    assert await client.store_checkpoint(tenant, sid, result)
    assert await client.store_token_scale(tenant, sid, f"{sid}-r5", 0.9)
    again = await client.history(tenant, sid, token_budget=settings.context_window)
    assert again.summary is not None and again.summary.startswith("SUMMARY")
    assert again.checkpoint_turn_id == result.checkpoint.turn_id
    assert again.token_scale == 0.9 and again.turn_ids[0] is None
    assert (await client.history(tenant, "unknown", token_budget=100)).messages == []
    assert not await client.store_token_scale(tenant, sid, "nope", 1.0)

    assert await client.extract(tenant, "u", sid, f"{sid}-r0") == 1
    recalled = await client.recall(tenant, "u", "long answers")
    assert [m.content for m in recalled] == ["The user likes long answers."]
    assert await client.recall(tenant, "someone-else", "long answers") == []
