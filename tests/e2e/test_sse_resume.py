"""SSE across gateway replicas, stop, steer and double-texting, on a stack with two gateways.

The turn is made long by the scripted LLM's ``chunk_delay_ms``, so a client can drop
mid-turn and rejoin on the other replica (ARCHITECTURE invariants 1 and 2, SPEC C-05).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from aiokafka import AIOKafkaConsumer
from httpx_sse import aconnect_sse
from weft_testkit import LocalStack, SseEvent, StackConfig, infra_env
from weft_testkit.kafka import client_options

from tests.stack_fixtures import stack_log_dir

AGENT = "builtin-smart-reasoning"
LONG_ANSWER = " ".join(f"word{i}" for i in range(240))
MAX_TURNS = 3


@pytest.fixture(scope="module")
def stack2(infra: dict[str, str]) -> Iterator[LocalStack]:
    """A stack with two gateway replicas (one module only: it costs a stack start)."""
    config = StackConfig(
        log_dir=stack_log_dir("e2e-sse"),
        replicas={"gateway": 2},
        extra_env={
            "WEFT_TURN_IDLE_TIMEOUT_S": "15",
            "WEFT_MAX_CONCURRENT_TURNS": str(MAX_TURNS),
        },
    )
    with LocalStack(config) as running:
        yield running


@pytest.fixture
async def gw(stack2: LocalStack) -> AsyncIterator[list[httpx.AsyncClient]]:
    """One API client per gateway replica, same tenant."""
    headers = {"Authorization": f"Bearer {stack2.api_key}"}
    clients = [
        httpx.AsyncClient(base_url=stack2.url("gateway", i), headers=headers, timeout=60)
        for i in range(2)
    ]
    yield clients
    for c in clients:
        await c.aclose()


@pytest.fixture
async def llm(stack2: LocalStack) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=stack2.llm_url, timeout=30) as c:
        yield c
        await c.post("/_reset")


async def _script(llm: httpx.AsyncClient, steps: list[dict[str, Any]]) -> None:
    resp = await llm.post("/_script", json={"steps": steps})
    assert resp.status_code == 200, resp.text


async def _session(client: httpx.AsyncClient) -> str:
    resp = await client.post("/api/v1/sessions", json={"title": "sse", "agent_id": AGENT})
    assert resp.status_code == 201, resp.text
    return str(resp.json()["id"])


async def _read(
    client: httpx.AsyncClient,
    method: str,
    url: str,
    *,
    body: dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
    stop_after: int | None = None,
    until_type: str | None = None,
) -> list[SseEvent]:
    """Events until ``complete`` (or the first ``stop_after`` events, then drop the
    connection). Heartbeat comments are not events."""
    events: list[SseEvent] = []
    async with aconnect_sse(client, method, url, json=body, headers=headers or {}) as source:
        assert source.response.status_code == 200, await source.response.aread()
        async for sse in source.aiter_sse():
            if not sse.event or not sse.data:
                continue
            events.append(SseEvent(sse.id, sse.event, json.loads(sse.data), 0.0))
            if sse.event == "complete" or len(events) == stop_after:
                break
            if until_type and sse.event == until_type:
                break
    return events


def _ids(events: list[SseEvent]) -> list[str]:
    return [e.id for e in events]


async def test_resume_on_other_replica_gets_exactly_the_rest(
    gw: list[httpx.AsyncClient], llm: httpx.AsyncClient
) -> None:
    await _script(llm, [{"content": LONG_ANSWER, "chunk_delay_ms": 40}])
    session_id = await _session(gw[0])
    url = f"/api/v1/agent-chat/{session_id}"
    first = await _read(gw[0], "POST", url, body={"query": "tell me"}, stop_after=6)
    assert len(first) == 6 and first[-1].event != "complete"

    rest = await _read(
        gw[1],
        "GET",
        f"/api/v1/sessions/{session_id}/stream",
        headers={"Last-Event-ID": first[-1].id},
    )
    assert rest[-1].event == "complete" and rest[-1].data["data"]["status"] == "completed"

    # Without Last-Event-ID the turn is replayed from its start: the reference sequence.
    whole = await _read(gw[0], "GET", f"/api/v1/sessions/{session_id}/stream")
    assert whole[0].event == "turn_started"
    assert _ids(first) + _ids(rest) == _ids(whole)  # exactly the remaining events, in order
    seqs = [e.data["seq"] for e in whole]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    for event in whole:  # every event: id, event = type, JSON data
        assert event.id and event.event == event.data["type"]


async def test_stream_of_session_without_turn_is_404_with_reason(
    gw: list[httpx.AsyncClient],
) -> None:
    session_id = await _session(gw[1])
    resp = await gw[1].get(f"/api/v1/sessions/{session_id}/stream")
    assert resp.status_code == 404
    assert "retention" in resp.json()["detail"]


async def test_idle_stream_ends_with_error_then_failed_complete(
    gw: list[httpx.AsyncClient], llm: httpx.AsyncClient
) -> None:
    await _script(llm, [{"content": "never finished", "stall_after_chunks": 1}])
    session_id = await _session(gw[0])
    events = await _read(gw[0], "POST", f"/api/v1/agent-chat/{session_id}", body={"query": "q"})
    assert [e.event for e in events[-2:]] == ["error", "complete"]
    assert events[-2].data["data"]["code"] == "stream_idle_timeout"
    assert events[-1].data["data"]["status"] == "failed"
    assert all(e.id for e in events)
    # The stream's end is not the turn's: the engine still waits on the stalled call. Stop
    # the turn, then release the call; released alone, the engine retries it and the turn's
    # later rounds would take the next test's script.
    stop = f"/api/v1/sessions/{session_id}/stop"
    assert (await gw[0].post(stop)).status_code == 202
    await llm.post("/_reset")
    for _ in range(300):
        if (await gw[0].post(stop)).status_code == 409:  # the turn has ended
            break
        await asyncio.sleep(0.1)
    assert (await gw[0].post(stop)).status_code == 409, "the stalled turn never ended"


async def _running_turn(
    gw: httpx.AsyncClient, llm: httpx.AsyncClient
) -> tuple[str, asyncio.Task[list[SseEvent]], list[SseEvent]]:
    """A turn streaming its answer slowly; returns after its first answer delta."""
    session_id = await _session(gw)
    started = asyncio.Event()
    seen: list[SseEvent] = []

    async def reader() -> list[SseEvent]:
        url = f"/api/v1/agent-chat/{session_id}"
        async with aconnect_sse(gw, "POST", url, json={"query": "long please"}) as source:
            async for sse in source.aiter_sse():
                if not sse.event or not sse.data:
                    continue
                seen.append(SseEvent(sse.id, sse.event, json.loads(sse.data), 0.0))
                if sse.event == "final_answer":
                    started.set()
                if sse.event == "complete":
                    break
        return seen

    task = asyncio.create_task(reader())
    await asyncio.wait_for(started.wait(), 60)
    return session_id, task, seen


async def test_stop_from_other_replica_cancels_and_keeps_partial_answer(
    gw: list[httpx.AsyncClient], llm: httpx.AsyncClient
) -> None:
    await _script(llm, [{"content": LONG_ANSWER, "chunk_delay_ms": 100}])
    session_id, task, _ = await _running_turn(gw[0], llm)
    resp = await gw[1].post(f"/api/v1/sessions/{session_id}/stop")
    assert resp.status_code == 202, resp.text
    assert resp.json()["status"] == "cancel_requested"
    events = await asyncio.wait_for(task, 60)
    complete = events[-1].data["data"]
    assert events[-1].event == "complete" and complete["status"] == "cancelled"
    assert resp.json()["request_id"] == events[-1].data["request_id"]
    assert [e.event for e in events].count("complete") == 1


async def test_stop_and_steer_without_running_turn_are_409(gw: list[httpx.AsyncClient]) -> None:
    session_id = await _session(gw[0])
    assert (await gw[0].post(f"/api/v1/sessions/{session_id}/stop")).status_code == 409
    steer = await gw[0].post(f"/api/v1/sessions/{session_id}/steer", json={"content": "x"})
    assert steer.status_code == 409
    assert (await gw[0].post("/api/v1/sessions/nope/stop")).status_code == 404


async def test_steer_and_reject_publish_and_refuse(
    stack2: LocalStack, gw: list[httpx.AsyncClient], llm: httpx.AsyncClient
) -> None:
    await _script(llm, [{"content": LONG_ANSWER, "chunk_delay_ms": 60}, {"content": "ok"}])
    consumer = AIOKafkaConsumer(
        f"{stack2.prefix}weft.agent.control.v1",
        **client_options(infra_env()),
        auto_offset_reset="latest",
        group_id=None,
    )
    await consumer.start()
    try:
        await consumer.getmany(timeout_ms=1000)  # join and fix the offsets before publishing
        session_id, task, _ = await _running_turn(gw[0], llm)
        busy = await gw[1].post(
            f"/api/v1/agent-chat/{session_id}",
            json={"query": "again", "double_texting": "reject"},
        )
        assert busy.status_code == 409 and "double_texting=reject" in busy.json()["detail"]
        steer = await gw[1].post(
            f"/api/v1/sessions/{session_id}/steer", json={"content": "be brief"}
        )
        assert steer.status_code == 202, steer.text
        message = await _next_control(consumer, session_id)
        assert message["type"] == "steer_message"
        assert message["data"] == {"content": "be brief"}
        assert message["request_id"] == steer.json()["request_id"]
        assert message["tenant_id"] == stack2.tenant and message["session_id"] == session_id
        await asyncio.wait_for(task, 60)
    finally:
        await consumer.stop()


async def _next_control(consumer: AIOKafkaConsumer, session_id: str) -> dict[str, Any]:
    async with asyncio.timeout(30):
        while True:
            batches = await consumer.getmany(timeout_ms=1000)
            for records in batches.values():
                for record in records:
                    message: dict[str, Any] = json.loads(record.value)
                    if message["session_id"] == session_id:
                        assert record.key == session_id.encode()  # keyed by session
                        return message


async def _assistant_message(client: httpx.AsyncClient, session_id: str) -> dict[str, Any]:
    """The turn's assistant message, once memory (fed from Kafka) has stored it."""
    async with asyncio.timeout(30):
        while True:
            messages = (await client.get(f"/api/v1/sessions/{session_id}/messages")).json()
            found = [m for m in messages if m["role"] == "assistant"]
            if found:
                return dict(found[0])
            await asyncio.sleep(0.2)


async def test_weknora_format(gw: list[httpx.AsyncClient], llm: httpx.AsyncClient) -> None:
    await _script(llm, [{"content": "Short answer."}])
    session_id = await _session(gw[0])
    url = f"/api/v1/agent-chat/{session_id}?format=weknora"
    events: list[dict[str, Any]] = []
    async with aconnect_sse(gw[0], "POST", url, json={"query": "q"}) as source:
        async for sse in source.aiter_sse():
            if not sse.data:
                continue
            assert sse.event == "message" and sse.id
            events.append(json.loads(sse.data))
            if events[-1]["response_type"] == "complete":
                break
    kinds = [e["response_type"] for e in events]
    assert "answer" in kinds and kinds[-1] == "complete" and events[-1]["done"]
    query = events[0]  # the reference stream opens with agent_query
    assert (query["response_type"], query["done"], query["session_id"]) == (
        "agent_query", True, session_id,
    )  # fmt: skip
    assistant = await _assistant_message(gw[0], session_id)
    assert query["assistant_message_id"] == assistant["id"]
    assert query["data"]["assistant_message_id"] == assistant["id"]
    assert len({e["id"] for e in events}) == 1 and events[0]["id"].startswith("req_")
    answer = "".join(e["content"] for e in events if e["response_type"] == "answer")
    assert answer.strip() == "Short answer."


async def test_concurrent_turn_limit_is_429_with_retry_after(
    gw: list[httpx.AsyncClient], llm: httpx.AsyncClient
) -> None:
    await _script(llm, [{"content": LONG_ANSWER, "chunk_delay_ms": 100}] * MAX_TURNS)
    running = [await _running_turn(gw[i % 2], llm) for i in range(MAX_TURNS)]
    session_id = await _session(gw[0])
    over = await gw[1].post(f"/api/v1/agent-chat/{session_id}", json={"query": "one more"})
    assert over.status_code == 429 and int(over.headers["Retry-After"]) > 0
    for sid, task, _ in running:
        await gw[0].post(f"/api/v1/sessions/{sid}/stop")
        await asyncio.wait_for(task, 60)


async def test_request_body_too_large_is_413(gw: list[httpx.AsyncClient]) -> None:
    session_id = await _session(gw[0])
    huge = {"query": "x" * (21 * 1024 * 1024)}
    resp = await gw[0].post(f"/api/v1/agent-chat/{session_id}", json=huge)
    assert resp.status_code == 413
