"""Engine fault tests with separate OS processes on the real Kafka and Redis.

One stack for the module: three engine replicas, every topic on ONE partition (so all
sessions share it), short lease and tool deadlines so the bounded times stay short.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from datetime import datetime
from typing import Any

import httpx
import pytest
from httpx_sse import aconnect_sse
from redis.asyncio import Redis
from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine
from weft_engine.act import TOOL_TIMEOUTS_S
from weft_storage.agent_config.models import Agent
from weft_testkit import (
    LocalStack,
    SseEvent,
    StackConfig,
    chat_requests,
    infra_env,
    read_turn,
)

from tests.stack_fixtures import stack_log_dir

NO_TOOLS_AGENT = "e2e-no-tools"
WEB_AGENT = "e2e-web"
"""Offered web_fetch (its web switch on), whose long deadline the stop tests rely on."""
COALESCE_WINDOW_MS = 250


@pytest.fixture(scope="module")
def faults_stack(infra: dict[str, str]) -> Iterator[LocalStack]:
    config = StackConfig(
        log_dir=stack_log_dir("e2e-faults"),
        replicas={"engine": 3},
        partitions=1,
        extra_env={
            "WEFT_LEASE_TTL_S": "3",
            "WEFT_TOOL_DEADLINE_S": "4",
            "WEFT_MAX_CONCURRENT_TURNS": "100",  # the gateway's per-tenant limit (default 20)
            "WEFT_DELTA_COALESCE_MS": str(COALESCE_WINDOW_MS),  # default 30
        },
    )
    with LocalStack(config) as running:
        asyncio.run(_create_agents(running.tenant))
        yield running


async def _create_agents(tenant: str) -> None:
    engine = create_async_engine(infra_env()["WEFT_DATABASE_URL"])
    async with async_sessionmaker(engine).begin() as s:
        config = {"allowed_tools": [], "max_iterations": 3, "mode": "smart-reasoning"}
        s.add(Agent(tenant_id=tenant, id=NO_TOOLS_AGENT, name="no tools", config=config))
        web = {"allowed_tools": ["search_knowledge"], "web_search_enabled": True,
               "max_iterations": 10, "mode": "smart-reasoning"}  # fmt: skip
        s.add(Agent(tenant_id=tenant, id=WEB_AGENT, name="web", config=web))
    await engine.dispose()


@pytest.fixture
async def client(faults_stack: LocalStack) -> AsyncIterator[httpx.AsyncClient]:
    async with faults_stack.api_client() as c:
        yield c


@pytest.fixture
async def script(faults_stack: LocalStack) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=faults_stack.llm_url, timeout=30) as c:
        yield c
        await c.post("/_reset")


async def _session(client: httpx.AsyncClient, agent: str) -> str:
    resp = await client.post("/api/v1/sessions", json={"agent_id": agent})
    assert resp.status_code == 201, resp.text
    return str(resp.json()["id"])


async def _turn(
    client: httpx.AsyncClient, stack: LocalStack, agent: str, query: str
) -> list[SseEvent]:
    session_id = await _session(client, agent)
    return await read_turn(
        client, f"/api/v1/agent-chat/{session_id}", api_key=stack.api_key,
        json_body={"query": query}, timeout_s=120,
    )  # fmt: skip


def _assert_clean_stream(events: list[SseEvent]) -> None:
    """Invariant 1 across a crash: each event once, in seq order, one complete, last."""
    ids = [e.data["id"] for e in events]
    seqs = [e.data["seq"] for e in events]
    assert len(set(ids)) == len(ids), "an event reached the client twice"
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs), seqs
    assert [e.event for e in events].count("complete") == 1 and events[-1].event == "complete"


async def test_a_stalled_llm_call_does_not_delay_other_sessions_on_its_partition(
    client: httpx.AsyncClient, faults_stack: LocalStack, script: httpx.AsyncClient
) -> None:  # invariant 4
    await script.post("/_script", json={
        # 10 s in the issue; 30 s here so that 50 turns on a loaded 2-core machine finish
        # inside the stall: the assertion is about ordering, not about throughput.
        "steps": [{"match": "STALL", "delay_ms": 30000, "content": "late but fine"}],
        "fallback": "demo",
    })  # fmt: skip
    finished: list[str] = []

    async def run(name: str, query: str) -> None:
        events = await _turn(client, faults_stack, NO_TOOLS_AGENT, query)
        assert events[-1].data["data"]["status"] == "completed", events[-1].data
        finished.append(name)

    stalled = asyncio.create_task(run("stalled", "STALL please"))
    await _until_the_model_is_asked(script, "STALL please")  # the others start behind it
    await asyncio.gather(*(run(f"s{i}", f"question number {i}") for i in range(50)))
    await stalled
    position = finished.index("stalled")
    assert finished[-1] == "stalled", f"the stalled session finished {position + 1}th of 51"
    assert len(finished) == 51


async def _until_the_model_is_asked(script: httpx.AsyncClient, text: str) -> None:
    """Wait until the test double received a chat request containing ``text``."""
    async with asyncio.timeout(30):
        while True:
            if any(text in json.dumps(body) for body in await chat_requests(script)):
                return
            await asyncio.sleep(0.05)


async def _lease_owner(stack: LocalStack, request_id: str) -> str:
    redis = Redis.from_url(infra_env()["WEFT_REDIS_URL"])
    try:
        async with asyncio.timeout(20):
            while True:
                owner = await redis.get(f"weft:turn:{request_id}:lease")
                if isinstance(owner, bytes) and owner:  # a client without decode_responses
                    return owner.decode()
                await asyncio.sleep(0.05)
    finally:
        await redis.aclose()


def _kill_owner(stack: LocalStack, owner: str) -> None:
    port = int(owner.rsplit("-", 1)[1])
    stack.kill("engine", stack.ports["engine"].index(port))


Act = Callable[[dict[str, Any], str], Awaitable[None]]


async def _watch(
    client: httpx.AsyncClient,
    stack: LocalStack,
    agent: str,
    query: str,
    trigger: Callable[[str, dict[str, Any]], bool],
    act: Act,
) -> list[SseEvent]:
    """Run a turn; at the first event that ``trigger(event type, data)`` picks, call
    ``act(data, session id)`` once, then read on until ``complete``."""
    session_id = await _session(client, agent)
    events: list[SseEvent] = []
    acted = False
    async with aconnect_sse(
        client, "POST", f"/api/v1/agent-chat/{session_id}", json={"query": query}, timeout=120
    ) as source:
        async for sse in source.aiter_sse():
            if not sse.event or not sse.data:
                continue
            data: dict[str, Any] = json.loads(sse.data)
            events.append(SseEvent(sse.id, sse.event, data, 0.0))
            if not acted and trigger(sse.event, data):
                acted = True
                await act(data, session_id)
            if sse.event == "complete":
                break
    return events


def _first(kind: str) -> Callable[[str, dict[str, Any]], bool]:
    return lambda event, _data: event == kind


def _kill_its_replica(stack: LocalStack, killed: list[str]) -> Act:
    """SIGKILL the replica running the event's turn."""

    async def act(event: dict[str, Any], _session_id: str) -> None:
        killed.append(await _lease_owner(stack, event["request_id"]))
        _kill_owner(stack, killed[-1])

    return act


async def test_killing_the_replica_mid_stream_re_runs_the_round(
    client: httpx.AsyncClient, faults_stack: LocalStack, script: httpx.AsyncClient
) -> None:  # invariants 1 and 2
    words = " ".join(f"word{i}" for i in range(120))
    rerun = "The rerun's answer, " + " ".join(f"again{i}" for i in range(20))
    await script.post("/_script", json={
        "steps": [
            {"match": "KILLSTREAM", "content": words, "chunk_delay_ms": 100},
            {"match": "KILLSTREAM", "content": rerun, "chunk_delay_ms": 20},
        ],
        "fallback": "demo",
    })  # fmt: skip
    killed: list[str] = []
    events = await asyncio.wait_for(_watch(
        client, faults_stack, NO_TOOLS_AGENT, "KILLSTREAM now",
        _first("final_answer"), _kill_its_replica(faults_stack, killed),
    ), 90)  # fmt: skip
    assert killed
    _assert_clean_stream(events)
    complete = events[-1].data["data"]
    assert complete["status"] == "completed", [e.event for e in events]
    answers = [e.data["data"] for e in events if e.event == "final_answer"]
    [marker] = [i for i, a in enumerate(answers) if a["superseded"]]
    assert answers[marker]["superseded_by"] == "rerun" and answers[marker]["round"] == 0
    dropped = "".join(a["delta"] for a in answers[:marker])
    assert dropped and words.startswith(dropped), "the client saw the first stream's text"
    assert "".join(a["delta"] for a in answers[marker + 1 :]) == rerun
    assert complete["final_answer"] == rerun and "word0" not in json.dumps(complete)
    stored = await _stored_answer(client, events[0].data["session_id"])
    assert stored == rerun


async def _stored_answer(client: httpx.AsyncClient, session_id: str) -> str:
    """The session's assistant message once memory stored it (memory persists from
    Kafka, asynchronously)."""
    async with asyncio.timeout(30):
        while True:
            resp = await client.get(f"/api/v1/sessions/{session_id}/messages")
            assert resp.status_code == 200, resp.text
            done = [m for m in resp.json() if m["role"] == "assistant" and m["status"] != "running"]
            if done:
                [message] = done
                assert message["status"] == "completed", message
                return str(message["content"])
            await asyncio.sleep(0.2)


async def test_killing_the_replica_during_a_tool_round_still_completes_the_turn(
    client: httpx.AsyncClient, faults_stack: LocalStack, script: httpx.AsyncClient
) -> None:  # invariant 2
    await script.post("/_script", json={
        "steps": [
            {"match": "KILLTOOLS", "tool_calls": [{"name": "search_knowledge",
                                                   "arguments": {"query": "refunds"}}]},
            # The answer starts late, so the kill lands in the tool round or before the
            # answer streams; a takeover then asks again and gets the same answer.
            {"match": "KILLTOOLS", "content": "Done after the tools.", "delay_ms": 3000},
            {"match": "KILLTOOLS", "content": "Done after the tools.", "delay_ms": 3000},
        ],
        "fallback": "demo",
    })  # fmt: skip
    killed: list[str] = []
    events = await asyncio.wait_for(_watch(
        client, faults_stack, "builtin-smart-reasoning", "KILLTOOLS go",
        _first("tool_call"), _kill_its_replica(faults_stack, killed),
    ), 90)  # fmt: skip
    assert killed
    _assert_clean_stream(events)
    complete = events[-1].data["data"]
    assert complete["status"] == "completed", [e.event for e in events]
    assert complete["final_answer"] == "Done after the tools."


async def test_a_tool_worker_that_never_answers_times_out_and_the_turn_goes_on(
    client: httpx.AsyncClient, faults_stack: LocalStack, script: httpx.AsyncClient
) -> None:  # SPEC E-17
    faults_stack.kill("tool_exec")
    await script.post("/_script", json={
        "steps": [
            {"match": "NOWORKER", "tool_calls": [{"name": "search_knowledge",
                                                  "arguments": {"query": "x"}}]},
            {"match": "NOWORKER", "content": "The search timed out, sorry."},
        ],
        "fallback": "demo",
    })  # fmt: skip
    events = await _turn(client, faults_stack, "builtin-smart-reasoning", "NOWORKER please")
    result = next(e for e in events if e.event == "tool_result").data["data"]
    assert not result["success"] and "timed out" in result["error"]
    assert events[-1].data["data"]["status"] == "completed"
    assert events[-1].data["data"]["final_answer"] == "The search timed out, sorry."


# No tool worker runs in these tests (tool-exec is killed), so the call never answers; its
# deadline is web_fetch's own (SPEC E-17), far beyond the tests' 90 s bound: a turn that
# waited for it instead of ending at the stop fails the test.
FETCH = {"name": "web_fetch", "arguments": {"items": [{"url": "https://example.com/slow"}]}}
FETCH_DEADLINE_S = TOOL_TIMEOUTS_S["web_fetch"]


def _ended_before_the_deadline(events: list[SseEvent]) -> bool:
    dispatched = _epoch(next(e for e in events if e.event == "tool_call").data["time"])
    return _epoch(events[-1].data["time"]) - dispatched < FETCH_DEADLINE_S


def _epoch(iso: str) -> float:
    return datetime.fromisoformat(iso).timestamp()


def _stop_the_turn(client: httpx.AsyncClient) -> Act:
    async def act(_event: dict[str, Any], session_id: str) -> None:
        resp = await client.post(f"/api/v1/sessions/{session_id}/stop")
        assert resp.status_code == 202, resp.text

    return act


async def test_a_stop_while_tools_run_ends_the_turn_without_waiting_for_them(
    client: httpx.AsyncClient, faults_stack: LocalStack, script: httpx.AsyncClient
) -> None:  # SPEC E-20 cancel, E-04 (a stop while tools run)
    faults_stack.kill("tool_exec")
    await script.post("/_script", json={
        "steps": [{"match": "STOPTOOLS", "tool_calls": [FETCH]}], "fallback": "demo",
    })  # fmt: skip
    events = await asyncio.wait_for(_watch(
        client, faults_stack, WEB_AGENT, "STOPTOOLS go",
        _first("tool_call"), _stop_the_turn(client),
    ), 90)  # fmt: skip
    _assert_clean_stream(events)
    assert [e.event for e in events if e.event.startswith("tool")] == ["tool_call"]
    assert events[-1].data["data"]["status"] == "cancelled"
    assert _ended_before_the_deadline(events)


async def test_a_stop_after_a_tool_round_answers_from_what_was_gathered(
    client: httpx.AsyncClient, faults_stack: LocalStack, script: httpx.AsyncClient
) -> None:  # SPEC E-20 cancel with tool results: rescue synthesis
    faults_stack.kill("tool_exec")
    await script.post("/_script", json={
        "steps": [
            # Arguments that are not an object fail before dispatch: a result at once.
            {"match": "RESCUE", "tool_calls": [{"name": "search_knowledge", "arguments": "[1]"}]},
            {"match": "RESCUE", "tool_calls": [FETCH]},
            {"match": "stopped the task", "content": "From what I gathered: nothing yet."},
        ],
        "fallback": "demo",
    })  # fmt: skip
    events = await asyncio.wait_for(_watch(
        client, faults_stack, WEB_AGENT, "RESCUE go",
        lambda event, data: event == "tool_call" and data["data"]["round"] == 1,
        _stop_the_turn(client),
    ), 90)  # fmt: skip
    _assert_clean_stream(events)
    [failed] = [e.data["data"] for e in events if e.event == "tool_result"]
    assert not failed["success"] and "JSON object" in failed["error"]
    complete = events[-1].data["data"]
    assert complete["status"] == "completed"
    assert complete["final_answer"] == "From what I gathered: nothing yet."
    assert _ended_before_the_deadline(events)


async def test_interrupt_stops_the_running_turn_then_runs_the_new_message(
    client: httpx.AsyncClient, faults_stack: LocalStack, script: httpx.AsyncClient
) -> None:  # double-texting "interrupt"
    faults_stack.kill("tool_exec")
    await script.post("/_script", json={
        "steps": [
            {"match": "FIRSTTURN", "tool_calls": [FETCH]},
            {"match": "SECONDTURN", "content": "The second turn answered."},
        ],
        "fallback": "demo",
    })  # fmt: skip
    second: list[asyncio.Task[list[SseEvent]]] = []

    async def interrupt(_event: dict[str, Any], session_id: str) -> None:
        second.append(asyncio.create_task(read_turn(
            client, f"/api/v1/agent-chat/{session_id}", api_key=faults_stack.api_key,
            json_body={"query": "SECONDTURN now", "double_texting": "interrupt"},
        )))  # fmt: skip

    first = await asyncio.wait_for(_watch(
        client, faults_stack, WEB_AGENT, "FIRSTTURN go",
        _first("tool_call"), interrupt,
    ), 90)  # fmt: skip
    _assert_clean_stream(first)
    assert first[-1].data["data"]["status"] == "cancelled"
    assert _ended_before_the_deadline(first)
    then = await asyncio.wait_for(second[0], 90)
    _assert_clean_stream(then)
    assert then[-1].data["data"]["status"] == "completed"
    assert then[-1].data["data"]["final_answer"] == "The second turn answered."
    assert then[0].data["request_id"] != first[0].data["request_id"]


async def test_answer_deltas_are_coalesced_over_the_configured_window(
    client: httpx.AsyncClient, faults_stack: LocalStack, script: httpx.AsyncClient
) -> None:  # "deltas coalesced over a short window (first delta immediately)"
    words = " ".join(f"w{i}" for i in range(40))
    await script.post("/_script", json={
        "steps": [{"match": "COALESCE", "content": words, "chunk_delay_ms": 50}],
        "fallback": "demo",
    })  # fmt: skip
    events = await _turn(client, faults_stack, NO_TOOLS_AGENT, "COALESCE please")
    assert events[-1].data["data"]["final_answer"] == words
    answers = [e.data for e in events if e.event == "final_answer" and e.data["data"]["delta"]]
    assert "".join(a["data"]["delta"] for a in answers) == words
    assert len(answers[0]["data"]["delta"]) <= 12, "the first piece waits for nothing"
    assert 3 <= len(answers) < 20, len(answers)
    times = [_epoch(a["time"]) for a in answers]
    # Every flush but the stream's last one closes a full window (the engine's
    # WEFT_DELTA_COALESCE_MS, set on this stack; 50 ms chunks would pass a 30 ms one).
    gaps = [later - earlier for earlier, later in itertools.pairwise(times)][:-1]
    assert min(gaps) >= 0.95 * COALESCE_WINDOW_MS / 1000, gaps
