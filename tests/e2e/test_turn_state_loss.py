"""Redis loses every turn's state (FLUSHDB) while turns run: each ends with ``error``
``turn_state_lost`` and exactly one ``complete`` instead of hanging (ARCHITECTURE
invariant 2), clients see no seq twice, memory stores no turn as running any more, the
engine's ``/readyz`` reports the emptied Redis until its recovery sweep ran, and a request
that was queued behind a running turn (in Redis alone) is read back from the log and runs.

The stack has its own Redis database (12, the only one this module ever flushes) and its
own PostgreSQL database (see ``StackConfig.database_url``), two engine replicas and no tool
worker: a tool call never answers and waits for its long deadline (web_fetch's, minutes),
so only the auditor can end those turns. The auditor runs with its default period.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from httpx_sse import aconnect_sse
from redis.asyncio import Redis
from sqlalchemy import select
from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine
from weft_engine.act import TOOL_TIMEOUTS_S
from weft_storage.agent_config.models import Agent
from weft_storage.memory.models import Message
from weft_testkit import LocalStack, SseEvent, StackConfig
from weft_testkit.own_infra import create_database, database_url, redis_url

from tests.stack_fixtures import stack_log_dir

REDIS_DB = 12
DATABASE_SUFFIX = "_turnloss"
WEB_AGENT = "e2e-turnloss-web"
FETCH = {"name": "web_fetch", "arguments": {"items": [{"url": "https://example.com/slow"}]}}
SLOW_WORDS = " ".join(f"word{i}" for i in range(400))
BOUND_S = 60.0
"""Generous wait for each turn's end after the wipe (measured: see the printed times)."""


def _redis_url() -> str:
    return redis_url(REDIS_DB)


def _database_url() -> str:
    return database_url(DATABASE_SUFFIX)


@pytest.fixture(scope="module")
def loss_stack(infra: dict[str, str]) -> Iterator[LocalStack]:
    asyncio.run(create_database(DATABASE_SUFFIX))
    config = StackConfig(
        log_dir=stack_log_dir("e2e-turn-state-loss"),
        replicas={"engine": 2},
        redis_url=_redis_url(),
        database_url=_database_url(),
        extra_env={"WEFT_MAX_CONCURRENT_TURNS": "100"},
    )
    with LocalStack(config) as running:
        asyncio.run(_create_agent(running.tenant))
        running.kill("tool_exec")  # tool calls wait for their deadline
        yield running


async def _create_agent(tenant: str) -> None:
    engine = create_async_engine(_database_url())
    async with async_sessionmaker(engine).begin() as s:
        web = {"allowed_tools": ["search_knowledge"], "web_search_enabled": True,
               "max_iterations": 5, "mode": "smart-reasoning"}  # fmt: skip
        s.add(Agent(tenant_id=tenant, id=WEB_AGENT, name="web", config=web))
    await engine.dispose()


@pytest.fixture
async def client(loss_stack: LocalStack) -> AsyncIterator[httpx.AsyncClient]:
    async with loss_stack.api_client(timeout=120) as c:
        yield c


@pytest.fixture
async def script(loss_stack: LocalStack) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=loss_stack.llm_url, timeout=30) as c:
        yield c
        await c.post("/_reset")


async def _script(script: httpx.AsyncClient, queries: list[str]) -> None:
    """One step per query (each step answers once): SLOWSTREAM streams a long answer
    slowly, QUEUED answers at once, WAITTOOL calls web_fetch, which nobody answers."""
    steps = [
        {"match": q, "content": SLOW_WORDS, "chunk_delay_ms": 250}
        if q.startswith("SLOWSTREAM")
        else {"match": q, "content": "queued answer"} if q.startswith("QUEUED")
        else {"match": q, "tool_calls": [FETCH]}
        for q in queries
    ]  # fmt: skip
    resp = await script.post("/_script", json={"steps": steps})
    assert resp.status_code == 200, resp.text


@dataclass
class _Turn:
    """One client's view of a turn: live until ``complete``, or dropped after its
    trigger event and resumed later with ``Last-Event-ID``."""

    session_id: str
    query: str
    trigger: str
    """The event type that shows the turn is in flight (final_answer or tool_call)..."""
    need: int = 1
    """... once this many of them arrived (a streaming answer: well under way)."""
    drop: bool = False
    events: list[SseEvent] = field(default_factory=list)
    started: asyncio.Event = field(default_factory=asyncio.Event)
    completed_at: float = 0.0

    @property
    def request_id(self) -> str:
        return str(self.events[0].data["request_id"])

    async def read(self, client: httpx.AsyncClient) -> None:
        url = f"/api/v1/agent-chat/{self.session_id}"
        await self._follow(client, "POST", url, json={"query": self.query})

    async def resume(self, client: httpx.AsyncClient) -> None:
        """Rejoin after the last event seen (the stream may be gone with Redis's data until
        the turn's next event recreates it: 404 until then)."""
        url = f"/api/v1/sessions/{self.session_id}/stream"
        async with asyncio.timeout(BOUND_S):
            while True:
                headers = {"Last-Event-ID": self.events[-1].id}
                if (await client.get(url, headers=headers, timeout=1)).status_code != 404:
                    break
                await asyncio.sleep(0.2)
        await self._follow(client, "GET", url, headers={"Last-Event-ID": self.events[-1].id})

    async def _follow(self, client: httpx.AsyncClient, method: str, url: str, **kw: Any) -> None:
        async with aconnect_sse(client, method, url, **kw) as source:
            assert source.response.status_code == 200, await source.response.aread()
            async for sse in source.aiter_sse():
                if not sse.event or not sse.data:
                    continue
                self.events.append(SseEvent(sse.id, sse.event, json.loads(sse.data), 0.0))
                if sse.event == "complete":
                    self.completed_at = time.monotonic()
                    return
                seen = [e for e in self.events if e.event == self.trigger]
                if len(seen) >= self.need and not self.started.is_set():
                    self.started.set()
                    if self.drop:
                        return


async def _session(client: httpx.AsyncClient) -> str:
    resp = await client.post("/api/v1/sessions", json={"agent_id": WEB_AGENT})
    assert resp.status_code == 201, resp.text
    return str(resp.json()["id"])


async def _readiness(stack: LocalStack) -> list[tuple[int, dict[str, Any]]]:
    async with httpx.AsyncClient(timeout=5) as http:
        answers = [await http.get(f"{stack.url('engine', i)}/readyz") for i in range(2)]
    return [(r.status_code, r.json()) for r in answers]


async def _stored_statuses(request_ids: list[str]) -> dict[str, str]:
    engine = create_async_engine(_database_url())
    try:
        async with async_sessionmaker(engine)() as s:
            rows = await s.execute(
                select(Message.request_id, Message.status).where(
                    Message.request_id.in_(request_ids), Message.role == "assistant"
                )
            )
            return {rid: status for rid, status in rows.all()}
    finally:
        await engine.dispose()


async def _until_stored(request_ids: list[str], wanted: set[str]) -> dict[str, str]:
    async with asyncio.timeout(BOUND_S):
        while True:
            statuses = await _stored_statuses(request_ids)
            if len(statuses) == len(request_ids) and set(statuses.values()) <= wanted:
                return statuses
            await asyncio.sleep(0.2)


def _assert_clean_stream(events: list[SseEvent]) -> None:
    """Invariant 1 across the loss: each event once, seqs strictly increasing, one
    complete, last."""
    ids = [e.data["id"] for e in events]
    seqs = [e.data["seq"] for e in events]
    assert len(set(ids)) == len(ids), "an event reached the client twice"
    assert all(a < b for a, b in itertools.pairwise(seqs)), seqs
    assert [e.event for e in events].count("complete") == 1 and events[-1].event == "complete"


async def test_turns_whose_state_redis_lost_end_with_an_error_and_one_complete(
    client: httpx.AsyncClient, loss_stack: LocalStack, script: httpx.AsyncClient
) -> None:  # invariant 2: Redis emptied under load
    kinds = [("SLOWSTREAM", "final_answer", 4), ("WAITTOOL", "tool_call", 1)]
    queries = [f"{query} {i}" for query, _, _ in kinds for i in range(3)]
    await _script(script, [*queries, "QUEUED behind a wait"])
    turns = [
        _Turn(await _session(client), f"{query} {i}", trigger, need, drop=i == 0)
        for query, trigger, need in kinds
        for i in range(3)
    ]
    readers = [asyncio.create_task(t.read(client)) for t in turns]
    async with asyncio.timeout(BOUND_S):
        await asyncio.gather(*(t.started.wait() for t in turns))
    rids = [t.request_id for t in turns]
    assert set((await _until_stored(rids, {"running"})).values()) == {"running"}
    assert [code for code, _ in await _readiness(loss_stack)] == [200, 200]
    # A second message to a session whose turn waits for its tool: queued (double-texting
    # "enqueue") in Redis alone, so the wipe loses it; Kafka still has it.
    queued = _Turn(turns[-1].session_id, "QUEUED behind a wait", "turn_started")
    queued_reader = asyncio.create_task(queued.read(client))
    await _until_queued(loss_stack.tenant, queued.session_id)

    redis = Redis.from_url(_redis_url())
    try:
        await redis.flushdb()  # this stack's database only, never FLUSHALL
    finally:
        await redis.aclose()
    wiped = time.monotonic()

    degraded = await _until_degraded(loss_stack)
    async with asyncio.timeout(BOUND_S):
        await asyncio.gather(*readers)
        await asyncio.gather(*(t.resume(client) for t in turns if t.drop))
    for turn in turns:
        _assert_clean_stream(turn.events)
        error, complete = turn.events[-2].data, turn.events[-1].data
        assert error["type"] == "error", [e.event for e in turn.events[-3:]]
        assert error["data"]["code"] == "turn_state_lost" and error["data"]["retryable"]
        assert complete["data"]["status"] == "failed"
    stored = await _until_stored(rids, {"failed"})
    assert set(stored.values()) == {"failed"}
    # The queued request is read back from agent.requests and runs once its session's
    # lost turn has ended.
    async with asyncio.timeout(BOUND_S):
        await queued_reader
    _assert_clean_stream(queued.events)
    assert queued.events[0].event == "turn_started"
    assert queued.events[-1].data["data"]["status"] == "completed"
    assert queued.events[-1].data["data"]["final_answer"] == "queued answer"
    await _until_ready(loss_stack)

    print("\n[turn state loss] wipe -> complete (s):",
          {t.query: round(t.completed_at - wiped, 2) for t in turns},
          "readiness while degraded:", degraded)  # fmt: skip


async def _until_queued(tenant: str, session_id: str) -> None:
    """Until the engine holds one request in the session's queue."""
    redis = Redis.from_url(_redis_url())
    try:
        async with asyncio.timeout(BOUND_S):
            while True:
                if await redis.llen(f"weft:session:{tenant}:{session_id}:active:queue"):
                    return
                await asyncio.sleep(0.05)
    finally:
        await redis.aclose()


async def _until_degraded(stack: LocalStack) -> list[str]:
    """The engines' turn_state checks once one reports Redis as emptied."""
    async with asyncio.timeout(BOUND_S):
        while True:
            answers = await _readiness(stack)
            checks = [str(body["checks"].get("turn_state", "")) for _, body in answers]
            if any(c.startswith("degraded") for c in checks):
                assert all(code == 503 for code, body in answers
                           if str(body["checks"]["turn_state"]).startswith("degraded"))  # fmt: skip
                return checks
            await asyncio.sleep(0.05)


async def _until_ready(stack: LocalStack) -> None:
    async with asyncio.timeout(BOUND_S):
        while True:
            if [code for code, _ in await _readiness(stack)] == [200, 200]:
                return
            await asyncio.sleep(0.2)


async def test_a_turn_whose_state_survives_is_not_ended_while_it_waits_for_a_long_tool(
    client: httpx.AsyncClient, loss_stack: LocalStack, script: httpx.AsyncClient
) -> None:  # a legitimate long wait is never cut
    await _script(script, ["WAITTOOL alone"])
    turn = _Turn(await _session(client), "WAITTOOL alone", "tool_call")
    reader = asyncio.create_task(turn.read(client))
    async with asyncio.timeout(BOUND_S):
        await turn.started.wait()
    tool_call = next(e for e in turn.events if e.event == "tool_call").data
    assert tool_call["data"]["tool_name"] == "web_fetch"
    assert TOOL_TIMEOUTS_S["web_fetch"] > 3 * 60
    # A negative can only be watched for a while: several audit periods (5 s each) after
    # the turn is old enough to be audited, it still runs and memory still says so.
    await asyncio.sleep(20)
    assert not reader.done(), [e.event for e in turn.events]
    assert (await _stored_statuses([turn.request_id])) == {turn.request_id: "running"}
    resp = await client.post(f"/api/v1/sessions/{turn.session_id}/stop")
    assert resp.status_code == 202, resp.text
    async with asyncio.timeout(BOUND_S):
        await reader
    _assert_clean_stream(turn.events)
    assert turn.events[-1].data["data"]["status"] == "cancelled"
    assert "error" not in [e.event for e in turn.events]
