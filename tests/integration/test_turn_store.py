"""TurnStore on the real Redis: two replicas can never both advance one turn."""

from __future__ import annotations

import secrets
import time
from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis
from weft_contracts import AgentConfig
from weft_engine.state import StaleTurnState, TurnState, TurnStore


@pytest.fixture
async def redis(infra: dict[str, str]) -> AsyncIterator[Redis]:
    client = Redis.from_url(infra["WEFT_REDIS_URL"])
    yield client
    await client.aclose()


def _state() -> TurnState:
    return TurnState(
        tenant_id="t", session_id="s", request_id=f"req_{secrets.token_hex(6)}", user_id="u",
        agent=AgentConfig(agent_id="a", model="m"), messages=[], started_at=time.time(),
    )  # fmt: skip


async def test_save_then_load_round_trips(redis: Redis) -> None:
    store = TurnStore(redis, ttl_s=60)
    saved = await store.save(_state())
    loaded = await store.load(saved.request_id)
    assert loaded == saved and saved.version == 1
    await store.delete(saved.request_id)
    assert await store.load(saved.request_id) is None


async def test_stale_writer_loses(redis: Redis) -> None:
    store = TurnStore(redis, ttl_s=60)
    base = await store.save(_state())
    replica_a = base.model_copy(update={"round": 1})
    replica_b = base.model_copy(update={"round": 2})
    await store.save(replica_a)
    with pytest.raises(StaleTurnState):
        await store.save(replica_b)
    stored = await store.load(base.request_id)
    assert stored is not None and stored.round == 1
