"""Automatic long-term memory extraction after a completed turn (SPEC M-10), on the real
PostgreSQL and Redis: the recorder queues the turn when ``turn_started`` says the agent has
memory on, the worker asks the model off the consume path and stores the facts scoped to
(tenant, user) once, re-delivered events never extract twice, failures are retried then
kept visible on the row, and an agent with memory off causes no row, call or fact."""

from __future__ import annotations

import asyncio
import secrets
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from redis.asyncio import Redis
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from weft_contracts import (
    CompleteData,
    CompleteEvent,
    TurnStartedData,
    TurnStartedEvent,
    TurnStatus,
)
from weft_llm import LLMRequest, TransientLLMError
from weft_memory.extraction import MemoryExtractor
from weft_memory.extraction_queue import ExtractionQueue
from weft_memory.extraction_worker import ExtractionWorker, WorkerSettings
from weft_memory.longterm import LongTermMemory
from weft_memory.memory_api import memory_router
from weft_memory.recorder import MessageRecorder
from weft_storage.memory.models_memory import Memory, MemoryExtraction
from weft_testkit.credentials import trusted
from weft_testkit.function_model import FunctionModel, ModelCall, Reply, answer


@pytest.fixture(scope="module")
def migrated(own_database: str) -> str:
    """This module's extraction queue is in a database of its own: the memory replicas of
    the test stacks running meanwhile claim every queued extraction of their database."""
    return own_database


@pytest.fixture
def answers() -> dict[str, list[Reply]]:
    """What the extraction model answers, queued by a marker the exchange contains."""
    return {}


@pytest.fixture
def model(answers: dict[str, list[Reply]]) -> FunctionModel:
    """Answers the extraction prompt from the queue of the marker its exchange contains;
    rows left by other tests (no marker of this test) get ``[]``."""

    def reply(call: ModelCall) -> Reply:
        exchange = str(call.last_message["content"])
        for marker, queue in answers.items():
            if marker in exchange:
                return queue.pop(0) if queue else answer("[]")
        return answer("[]")

    return FunctionModel(reply=reply)


def _asked(model: FunctionModel, marker: str) -> list[LLMRequest]:
    """The model's requests about this test's turns."""
    return [r for r in model.requests if marker in str(r.messages[-1]["content"])]


@pytest.fixture
def queue(sessions: async_sessionmaker[AsyncSession]) -> ExtractionQueue:
    return ExtractionQueue(sessions)


@pytest.fixture
def worker(
    sessions: async_sessionmaker[AsyncSession], model: FunctionModel, queue: ExtractionQueue
) -> ExtractionWorker:
    extractor = MemoryExtractor(sessions, model, "m", LongTermMemory(sessions))
    return ExtractionWorker(
        queue, extractor, WorkerSettings(max_attempts=2, retry_backoff_s=0, poll_s=30)
    )


def _turn(marker: str, *, memory: bool, user: str = "alice") -> dict[str, Any]:
    ids = {
        "tenant_id": f"t-{secrets.token_hex(4)}",
        "session_id": f"ses_{secrets.token_hex(6)}",
        "request_id": f"req_{secrets.token_hex(6)}",
    }
    started = TurnStartedEvent(**ids, seq=1, data=TurnStartedData(
        query=f"{marker}: I deploy everything on Kubernetes.", user_id=user, agent_id="a",
        memory_enabled=memory,
    ))  # fmt: skip
    return {"ids": ids, "started": started}


def _complete(ids: dict[str, str], status: TurnStatus = TurnStatus.COMPLETED) -> CompleteEvent:
    data = CompleteData(status=status, final_answer="Noted.", duration_ms=5)
    return CompleteEvent(**ids, seq=9, data=data)


async def _drain(worker: ExtractionWorker) -> None:
    while await worker.run_once():
        pass


async def _row(sessions: async_sessionmaker[AsyncSession], rid: str) -> MemoryExtraction | None:
    async with sessions() as s:
        return await s.get(MemoryExtraction, rid)


async def _until_done(sessions: async_sessionmaker[AsyncSession], rid: str) -> None:
    while True:
        row = await _row(sessions, rid)
        if row is not None and row.status == "done":
            return
        await asyncio.sleep(0.05)


async def _facts(sessions: async_sessionmaker[AsyncSession], tenant: str) -> list[Memory]:
    async with sessions() as s:
        return list((await s.scalars(select(Memory).where(Memory.tenant_id == tenant))).all())


async def test_completed_turn_yields_scoped_facts_once_despite_redelivery(
    sessions: async_sessionmaker[AsyncSession],
    redis: Redis,
    model: FunctionModel,
    answers: dict[str, list[Reply]],
    worker: ExtractionWorker,
) -> None:
    marker = f"M{secrets.token_hex(4)}"
    turn = _turn(marker, memory=True)
    ids = turn["ids"]
    answers[marker] = [
        answer('["The user deploys on Kubernetes."]'),
        answer('["Something else."]'),
    ]
    woken: list[bool] = []
    recorder = MessageRecorder(sessions, redis, on_extraction_due=lambda: woken.append(True))
    await recorder.handle(turn["started"])
    row = await _row(sessions, ids["request_id"])
    assert row is not None and row.status == "waiting"  # the turn is still running
    await recorder.handle(_complete(ids))
    assert woken == [True]  # the consumer only queued it: no model call on the consume path
    assert _asked(model, marker) == []
    await _drain(worker)
    facts = await _facts(sessions, ids["tenant_id"])
    assert [(f.user_id, f.content) for f in facts] == [("alice", "The user deploys on Kubernetes.")]
    assert facts[0].source_request_id == ids["request_id"]

    # Re-delivered turn_started and complete (the bus dedupe bypassed): nothing reopens.
    await recorder.handle(turn["started"])
    await recorder.handle(_complete(ids))
    await _drain(worker)
    assert len(_asked(model, marker)) == 1
    assert len(await _facts(sessions, ids["tenant_id"])) == 1
    row = await _row(sessions, ids["request_id"])
    assert row is not None and (row.status, row.facts, row.attempts) == ("done", 1, 1)


async def test_memory_disabled_or_unfinished_turn_extracts_nothing(
    sessions: async_sessionmaker[AsyncSession],
    redis: Redis,
    model: FunctionModel,
    answers: dict[str, list[Reply]],
    worker: ExtractionWorker,
) -> None:
    recorder = MessageRecorder(sessions, redis)
    marker = f"M{secrets.token_hex(4)}"
    off = _turn(marker, memory=False)
    answers[marker] = [answer('["The user deploys on Kubernetes."]')]
    await recorder.handle(off["started"])
    await recorder.handle(_complete(off["ids"]))
    cancelled = _turn(marker, memory=True)
    await recorder.handle(cancelled["started"])
    await recorder.handle(_complete(cancelled["ids"], TurnStatus.CANCELLED))
    await _drain(worker)
    assert await _row(sessions, off["ids"]["request_id"]) is None  # SPEC M-10: no write
    skipped = await _row(sessions, cancelled["ids"]["request_id"])
    assert skipped is not None and skipped.status == "skipped"
    assert _asked(model, marker) == []
    for turn in (off, cancelled):
        assert await _facts(sessions, turn["ids"]["tenant_id"]) == []


async def test_model_failure_is_retried_then_reported_not_raised(
    sessions: async_sessionmaker[AsyncSession],
    redis: Redis,
    model: FunctionModel,
    answers: dict[str, list[Reply]],
    worker: ExtractionWorker,
    queue: ExtractionQueue,
) -> None:
    marker = f"M{secrets.token_hex(4)}"
    turn = _turn(marker, memory=True)
    ids = turn["ids"]
    answers[marker] = [TransientLLMError("provider down")] * 2
    recorder = MessageRecorder(sessions, redis)
    await recorder.handle(turn["started"])
    await recorder.handle(_complete(ids))
    await _drain(worker)
    row = await _row(sessions, ids["request_id"])
    assert row is not None and row.status == "failed" and row.attempts == 2
    assert row.error is not None and "provider down" in row.error
    assert len(_asked(model, marker)) == 2 and await _facts(sessions, ids["tenant_id"]) == []

    app = FastAPI()
    app.include_router(memory_router(sessions, LongTermMemory(sessions), None, queue))
    async with httpx.AsyncClient(transport=trusted(app), base_url="http://memory") as client:
        url = f"/internal/memories/extractions/{ids['request_id']}"
        shown = await client.get(url, params={"tenant_id": ids["tenant_id"]})
        assert shown.status_code == 200 and shown.json()["status"] == "failed"
        assert "provider down" in shown.json()["error"]
        other = await client.get(url, params={"tenant_id": "someone-else"})
        assert other.status_code == 404  # invariant 5


async def test_running_worker_is_woken_by_the_recorder(
    sessions: async_sessionmaker[AsyncSession],
    redis: Redis,
    answers: dict[str, list[Reply]],
    worker: ExtractionWorker,
) -> None:
    marker = f"M{secrets.token_hex(4)}"
    turn = _turn(marker, memory=True, user="bob")
    answers[marker] = [answer('["The user deploys on Kubernetes."]')]
    recorder = MessageRecorder(sessions, redis, on_extraction_due=worker.wake)
    await worker.start()  # polls every 30 s: only the wake-up can make this quick
    try:
        await recorder.handle(turn["started"])
        await recorder.handle(_complete(turn["ids"]))
        async with asyncio.timeout(20):
            await _until_done(sessions, turn["ids"]["request_id"])
    finally:
        await worker.stop()
    facts = await _facts(sessions, turn["ids"]["tenant_id"])
    assert [f.user_id for f in facts] == ["bob"]
