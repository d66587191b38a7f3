"""Human approvals through the whole stack (SPEC H-01..H-05): the agent asks before it
writes, a person answers through the public API, and the question survives a killed
engine, a wiped Redis and a restart of every process.

The stack has two engine and two gateway replicas (a decision sent to one gateway reaches
the stream another one serves), its own Redis database (11, the only one this module ever
flushes) and its own PostgreSQL database. A turn's events are read back from
``agent.events`` itself where a test disturbs the SSE path (a wipe, restarts).
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import suppress
from typing import Any

import asyncpg
import httpx
import pytest
from aiokafka import AIOKafkaConsumer
from httpx_sse import aconnect_sse
from redis.asyncio import Redis
from sqlalchemy import update
from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine
from weft_contracts import Topic
from weft_gateway.auth import ApiKeyAuth, hash_key
from weft_storage.gateway.keys import ApiKey
from weft_testkit import LocalStack, StackConfig, infra_env
from weft_testkit.kafka import client_options
from weft_testkit.own_infra import create_database, database_url, redis_url

from tests.e2e.prompted_turn import PromptedTurn
from tests.e2e.sandbox_helpers import sandbox_session
from tests.stack_fixtures import stack_log_dir

REDIS_DB = 11
DATABASE_SUFFIX = "_approvals"
TOOLS = ["write_sandbox_file", "read_file", "shell_exec"]
WRITE = {"path": "output/approved.txt", "content": "written after approval"}
TIMER_ENV = {"WEFT_APPROVAL_POLL_S": "0.5"}


def _redis_url() -> str:
    return redis_url(REDIS_DB)


def _database_url() -> str:
    return database_url(DATABASE_SUFFIX)


@pytest.fixture(scope="module")
def approvals_stack(infra: dict[str, str]) -> Iterator[LocalStack]:
    asyncio.run(create_database(DATABASE_SUFFIX))
    config = StackConfig(
        log_dir=stack_log_dir("e2e-approvals"),
        replicas={"engine": 2, "gateway": 2},
        redis_url=_redis_url(),
        database_url=_database_url(),
        extra_env=TIMER_ENV,
    )
    with LocalStack(config) as running:
        yield running


@pytest.fixture
async def gateways(approvals_stack: LocalStack) -> AsyncIterator[list[httpx.AsyncClient]]:
    """A client of each gateway replica, as the stack's tenant and user."""
    headers = {"Authorization": f"Bearer {approvals_stack.api_key}"}
    clients = [
        httpx.AsyncClient(base_url=approvals_stack.url("gateway", i), headers=headers, timeout=60)
        for i in range(2)
    ]
    yield clients
    for client in clients:
        await client.aclose()


@pytest.fixture
async def script(approvals_stack: LocalStack) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=approvals_stack.llm_url, timeout=30) as c:
        await c.post("/_reset")
        yield c
        await c.post("/_reset")


async def _session(api: httpx.AsyncClient, **agent: Any) -> str:
    """A session of a new sandbox agent that asks before writes unless ``agent`` says
    otherwise."""
    name = f"approvals-{secrets.token_hex(3)}"
    return await sandbox_session(api, name, TOOLS, **{"access_level": "confirm", **agent})


async def _script(script: httpx.AsyncClient, marker: str, calls: list[dict[str, Any]]) -> None:
    """The model calls ``calls`` once, then answers with the results it read."""
    steps = [{"match": marker, "tool_calls": calls}, {"match": marker, "content": "done"}]
    assert (await script.post("/_script", json={"steps": steps})).status_code == 200


async def _decide(api: httpx.AsyncClient, prompt_id: str, **body: Any) -> httpx.Response:
    return await api.post(f"/api/v1/agent/prompts/{prompt_id}", json=body)


async def _kafka_turn(
    stack: LocalStack, request_id: str, timeout_s: float = 90
) -> list[dict[str, Any]]:
    """The turn's events as ``agent.events`` holds them, up to its ``complete``."""
    consumer = AIOKafkaConsumer(
        stack.prefix + Topic.AGENT_EVENTS.value, **client_options(infra_env()),
        group_id=None, auto_offset_reset="earliest", enable_auto_commit=False,
    )  # fmt: skip
    await consumer.start()
    events: list[dict[str, Any]] = []
    try:
        async with asyncio.timeout(timeout_s):
            async for record in consumer:
                event = json.loads(record.value)
                if event["request_id"] != request_id:
                    continue
                events.append(event)
                if event["type"] == "complete":  # at least once: one event per id
                    return sorted({e["id"]: e for e in events}.values(), key=lambda e: e["seq"])
    finally:
        await consumer.stop()
    raise AssertionError("unreachable")


async def test_a_denied_write_never_runs_and_the_agent_reads_why(
    approvals_stack: LocalStack, gateways: list[httpx.AsyncClient], script: httpx.AsyncClient
) -> None:
    """SPEC H-01 (confirm asks before a write), H-02 (the decision through another gateway
    replica reaches this one's stream), H-03 (deny comes back as a tool result)."""
    sid = await _session(gateways[0])
    await _script(
        script, "DENY-ME", [{"id": "w1", "name": "write_sandbox_file", "arguments": WRITE}]
    )
    turn = PromptedTurn(gateways[0], sid, "DENY-ME please")
    prompt = await turn.prompt()
    assert prompt["tool_name"] == "write_sandbox_file" and prompt["risk"] == "write"
    assert not turn.of("tool_result"), "nothing ran while the person is asked"

    # The decision route waits for memory to record the prompt; the list shows what memory
    # has recorded, a moment after the stream showed it.
    listed = await _pending_ids(gateways[1], sid)
    assert listed == [prompt["prompt_id"]]

    denied = await _decide(gateways[1], prompt["prompt_id"], decision="deny", reason="not today")
    assert denied.status_code == 200, denied.text
    again = await _decide(gateways[1], prompt["prompt_id"], decision="deny", reason="not today")
    assert again.status_code == 200 and again.json()["repeated"], again.text
    flipped = await _decide(gateways[0], prompt["prompt_id"], decision="approve")
    assert flipped.status_code == 409, flipped.text

    await turn.done()
    (resolved,) = turn.of("tool_approval_resolved")
    assert resolved["outcome"] == "denied" and resolved["prompt_id"] == prompt["prompt_id"]
    (result,) = turn.of("tool_result")
    assert not result["success"] and "denied" in result["error"] and "not today" in result["error"]
    assert turn.of("complete")[0]["status"] == "completed"
    read = await gateways[0].get(f"/api/v1/agent/prompts/{prompt['prompt_id']}")
    assert read.json()["status"] == "denied", read.text
    decisions = read.json()["decisions"]
    assert [(d["decision"], d["applied"]) for d in decisions] == [
        ("deny", True),  # applied
        ("deny", False),  # the repeat, kept
        ("approve", False),  # refused, kept
    ]


async def test_an_approval_survives_the_asking_engine_killed(
    approvals_stack: LocalStack, gateways: list[httpx.AsyncClient], script: httpx.AsyncClient
) -> None:
    """SPEC H-02: the turn holds nothing while it waits, so SIGKILLing the engine replica
    that asked loses nothing: the other replica applies the decision and the write runs."""
    sid = await _session(gateways[0])
    await _script(
        script, "KILL-ASKER", [{"id": "w1", "name": "write_sandbox_file", "arguments": WRITE}]
    )
    turn = PromptedTurn(gateways[0], sid, "KILL-ASKER please")
    prompt = await turn.prompt()
    asker = await _replica_that_logged(approvals_stack, "engine", prompt["prompt_id"])
    assert approvals_stack.kill("engine", asker) == -9
    try:
        approved = await _decide(gateways[1], prompt["prompt_id"], decision="approve")
        assert approved.status_code == 200, approved.text
        await turn.done()
    finally:
        approvals_stack.start_again("engine", asker)
    (result,) = turn.of("tool_result")
    assert result["success"], result
    assert turn.of("tool_approval_resolved")[0]["outcome"] == "approved"
    assert turn.of("complete")[0]["status"] == "completed"


async def test_remember_for_the_session_skips_the_next_prompt(
    approvals_stack: LocalStack, gateways: list[httpx.AsyncClient], script: httpx.AsyncClient
) -> None:
    """SPEC H-04: "remember for this session" is a grant; the next write of the same tool
    in the session runs without asking, while another session still asks."""
    sid = await _session(gateways[0])
    call = [{"id": "w1", "name": "write_sandbox_file", "arguments": WRITE}]
    await _script(script, "REMEMBER-ONE", call)
    first = PromptedTurn(gateways[0], sid, "REMEMBER-ONE please")
    prompt = await first.prompt()
    ok = await _decide(gateways[0], prompt["prompt_id"], decision="approve", remember="session")
    assert ok.status_code == 200, ok.text
    await first.done()
    await _script(script, "REMEMBER-TWO", call)
    second = PromptedTurn(gateways[0], sid, "REMEMBER-TWO please")
    events = await second.done()
    assert not second.of("tool_approval_required"), events
    assert second.of("tool_result")[0]["success"]
    grants = (await gateways[0].get("/api/v1/agent/grants")).json()["grants"]
    assert any(g["session_id"] == sid and g["operations"] == ["write_sandbox_file"] for g in grants)


async def test_a_stop_while_a_person_is_asked_ends_the_turn_cleanly(
    approvals_stack: LocalStack, gateways: list[httpx.AsyncClient], script: httpx.AsyncClient
) -> None:
    """SPEC E-04 with H-02: a stop while waiting ends the turn with one ``complete``; the
    prompt is then cancelled and a late decision is refused."""
    sid = await _session(gateways[0])
    await _script(
        script, "STOP-WAIT", [{"id": "w1", "name": "write_sandbox_file", "arguments": WRITE}]
    )
    turn = PromptedTurn(gateways[0], sid, "STOP-WAIT please")
    prompt = await turn.prompt()
    assert (await gateways[1].post(f"/api/v1/sessions/{sid}/stop")).status_code == 202
    await turn.done()
    assert len(turn.of("complete")) == 1 and turn.of("complete")[0]["status"] == "cancelled"
    assert not turn.of("tool_result")
    late = await _poll_status(gateways[0], prompt["prompt_id"], "cancelled")
    assert late == "cancelled"
    refused = await _decide(gateways[0], prompt["prompt_id"], decision="approve")
    assert refused.status_code == 409, refused.text


async def test_a_redis_wipe_while_waiting_loses_nothing(
    approvals_stack: LocalStack, gateways: list[httpx.AsyncClient], script: httpx.AsyncClient
) -> None:
    """SPEC H-02, invariant 2: Redis loses every turn's state while a person is asked; the
    waiting turn is put back from memory's copy (never ``turn_state_lost``) and goes on
    after the decision."""
    sid = await _session(gateways[0])
    await _script(
        script, "WIPE-WAIT", [{"id": "w1", "name": "write_sandbox_file", "arguments": WRITE}]
    )
    turn = PromptedTurn(gateways[0], sid, "WIPE-WAIT please")
    prompt = await turn.prompt()
    request_id = turn.events[0][1]["request_id"]
    await _wait_suspension_kept(approvals_stack, request_id)
    redis = Redis.from_url(_redis_url())
    try:
        await redis.flushdb()
    finally:
        await redis.aclose()
    turn.task.cancel()
    with suppress(asyncio.CancelledError, httpx.HTTPError):
        await turn.task
    approved = await _decide(gateways[1], prompt["prompt_id"], decision="approve")
    assert approved.status_code == 200, approved.text
    events = await _kafka_turn(approvals_stack, request_id)
    types = [e["type"] for e in events]
    assert "error" not in types, events[-3:]
    result = next(e["data"] for e in events if e["type"] == "tool_result")
    assert result["success"], result
    assert events[-1]["data"]["status"] == "completed"
    seqs = [e["seq"] for e in events]
    assert seqs == sorted(set(seqs)), "no seq twice across the wipe"


async def test_every_process_restarted_while_a_prompt_waits_and_its_timeout_still_fires(
    approvals_stack: LocalStack, gateways: list[httpx.AsyncClient], script: httpx.AsyncClient
) -> None:
    """SPEC H-03: the expiry is a durable timer (memory, PostgreSQL): with every process
    of the stack SIGKILLed and started again while the prompt waits, it still fires, and
    the agent reads the timeout as a tool result and finishes."""
    sid = await _session(gateways[0], approval_timeout_s=10)
    await _script(
        script, "RESTART-ALL", [{"id": "w1", "name": "write_sandbox_file", "arguments": WRITE}]
    )
    turn = PromptedTurn(gateways[0], sid, "RESTART-ALL please")
    prompt = await turn.prompt()
    request_id = turn.events[0][1]["request_id"]
    turn.task.cancel()
    with suppress(asyncio.CancelledError, httpx.HTTPError):
        await turn.task
    for name in ("engine", "gateway", "memory", "agent_config", "tool_exec", "sandbox"):
        for index in range(len(approvals_stack.ports[name])):
            approvals_stack.kill(name, index)
    for name in ("memory", "agent_config", "gateway", "engine", "tool_exec", "sandbox"):
        for index in range(len(approvals_stack.ports[name])):
            approvals_stack.start_again(name, index)
    events = await _kafka_turn(approvals_stack, request_id, timeout_s=120)
    resolved = next(e for e in events if e["type"] == "tool_approval_resolved")
    assert resolved["data"]["outcome"] == "timeout" and resolved["data"]["decided_by"] == "system"
    result = next(e["data"] for e in events if e["type"] == "tool_result")
    assert not result["success"] and "nobody approved" in result["error"]
    assert events[-1]["data"]["status"] == "completed"
    lag = time.time() - _epoch(prompt["expires_at"])
    print(f"timeout resolved {lag:.1f}s after expiry, counting restarts")


async def test_the_reference_clients_see_approval_events(
    approvals_stack: LocalStack, gateways: list[httpx.AsyncClient], script: httpx.AsyncClient
) -> None:
    """The ``?format=weknora`` projection names the approval events as the reference's
    clients expect (``tool_approval_required`` / ``tool_approval_resolved``, with
    ``pending_id``)."""
    sid = await _session(gateways[0])
    await _script(
        script, "WEKNORA-WAIT", [{"id": "w1", "name": "write_sandbox_file", "arguments": WRITE}]
    )
    seen: list[dict[str, Any]] = []
    url = f"/api/v1/agent-chat/{sid}?format=weknora"

    async def read() -> None:
        async with aconnect_sse(gateways[0], "POST", url, json={"query": "WEKNORA-WAIT"},
                                timeout=120) as source:  # fmt: skip
            async for sse in source.aiter_sse():
                if sse.data:
                    body = json.loads(sse.data)
                    seen.append(body)
                    if body["response_type"] == "tool_approval_required":
                        pid = body["data"]["pending_id"]
                        await _decide(gateways[1], pid, decision="deny")
                    if body["response_type"] == "complete":
                        return

    await asyncio.wait_for(read(), 120)
    kinds = [b["response_type"] for b in seen]
    assert "tool_approval_required" in kinds and "tool_approval_resolved" in kinds, kinds
    asked = next(b for b in seen if b["response_type"] == "tool_approval_required")
    assert asked["done"] is True and asked["data"]["pending_id"] == asked["data"]["prompt_id"]


async def test_a_write_whose_worker_died_comes_back_to_a_person(
    approvals_stack: LocalStack, gateways: list[httpx.AsyncClient], script: httpx.AsyncClient
) -> None:
    """SPEC H-05: the sandbox is SIGKILLed while it runs a write (the command had started:
    its claim is in Redis); Kafka hands the call to the restarted sandbox, which finds the
    claim and answers "outcome unknown"; the engine asks a person instead of telling the
    model, and "run again" runs it (under a new id) to completion. No silent retry."""
    sid = await _session(gateways[0], access_level="auto_write")
    command = "sleep 8; echo ran >> output/runs.txt; cat output/runs.txt"
    calls = [{"id": "s1", "name": "shell_exec", "arguments": {"command": command}}]
    await _script(script, "WORKER-DIES", calls)
    turn = PromptedTurn(gateways[0], sid, "WORKER-DIES please")
    await _until_claimed(approvals_stack)
    assert approvals_stack.kill("sandbox") == -9
    approvals_stack.start_again("sandbox")
    prompt = await turn.prompt()
    assert prompt["kind"] == "uncertain_outcome" and prompt["call_id"] == "s1"
    assert not turn.of("tool_result"), "the model is not told before the person decides"
    again = await _decide(gateways[1], prompt["prompt_id"], decision="approve")
    assert again.status_code == 200, again.text
    await turn.done()
    (result,) = turn.of("tool_result")
    assert result["call_id"] == "s1" and result["success"], result
    assert "ran" in result["output"], result
    assert turn.of("complete")[0]["status"] == "completed"


async def _until_claimed(stack: LocalStack) -> None:
    """Until a sandbox replica has claimed a write call (it started running it)."""
    redis = Redis.from_url(_redis_url())
    try:
        for _ in range(300):
            async for key in redis.scan_iter(match=f"weft:{stack.prefix}sandboxcall:*"):
                if (await redis.get(key)) not in (None, b"done"):
                    return
            await asyncio.sleep(0.1)
    finally:
        await redis.aclose()
    raise AssertionError("no sandbox replica started the write")


async def test_an_expired_prompt_escalates_and_a_platform_service_decides(
    approvals_stack: LocalStack, gateways: list[httpx.AsyncClient], script: httpx.AsyncClient
) -> None:
    """Beyond the reference: an agent whose prompts escalate. At the expiry memory publishes
    ``approval_escalated`` (with the approver group) on ``session.notices``, the gateway
    copies it into the session's stream, and a platform service decides with a tenant key
    that has the ``approvals:decide`` scope (another user than the turn's)."""
    sid = await _session(
        gateways[0], approval_timeout_s=10, approval_on_timeout="escalate",
        approver_group="finance-approvers", escalation_timeout_s=600,
    )  # fmt: skip
    await _script(
        script, "ESCALATE", [{"id": "w1", "name": "write_sandbox_file", "arguments": WRITE}]
    )
    turn = PromptedTurn(gateways[0], sid, "ESCALATE please")
    prompt = await turn.prompt()
    assert prompt["on_timeout"] == "escalate"
    key = await _approver_key(approvals_stack)
    headers = {"Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(base_url=approvals_stack.url("gateway", 1), headers=headers,
                                 timeout=60) as platform:  # fmt: skip
        escalated = await _notice(turn, "approval_escalated")
        assert escalated["approver_group"] == "finance-approvers"
        assert escalated["prompt_id"] == prompt["prompt_id"]
        decided = await _decide(platform, prompt["prompt_id"], decision="approve")
        assert decided.status_code == 200, decided.text
    await turn.done()
    resolved = turn.of("tool_approval_resolved")[0]
    assert resolved["outcome"] == "approved" and resolved["decided_by"] == "platform-approver"
    assert turn.of("tool_result")[0]["success"]


async def _approver_key(stack: LocalStack) -> str:
    """A key of the stack's tenant for another user, with the ``approvals:decide`` scope."""
    key = f"key-{secrets.token_hex(16)}"
    engine = create_async_engine(_database_url())
    try:
        await ApiKeyAuth(async_sessionmaker(engine)).register(
            stack.tenant, "platform-approver", key, "approver"
        )
        async with engine.begin() as conn:
            await conn.execute(
                update(ApiKey).where(ApiKey.key_hash == hash_key(key))
                .values(scopes=["approvals:decide"])
            )  # fmt: skip
    finally:
        await engine.dispose()
    return key


async def _notice(turn: PromptedTurn, kind: str) -> dict[str, Any]:
    for _ in range(300):
        found = turn.of(kind)
        if found:
            return found[0]
        await asyncio.sleep(0.1)
    raise AssertionError(f"no {kind} on the stream: {[e for e, _ in turn.events]}")


async def _replica_that_logged(stack: LocalStack, name: str, needle: str) -> int:
    """The index of the replica of ``name`` whose log mentions ``needle``.

    The engine logs a prompt after publishing it (the line is off the round's path), so the
    prompt can reach the stream before the line reaches the file: wait for it a little."""
    for _ in range(100):
        for index, port in enumerate(stack.ports[name]):
            if needle in stack.log_path(name, port).read_text(errors="replace"):
                return index
        await asyncio.sleep(0.05)
    raise AssertionError(f"no {name} replica logged {needle}")


async def _pending_ids(api: httpx.AsyncClient, session_id: str) -> list[str]:
    ids: list[str] = []
    for _ in range(100):
        pending = await api.get("/api/v1/agent/prompts", params={"session_id": session_id})
        assert pending.status_code == 200, pending.text
        ids = [p["prompt_id"] for p in pending.json()["prompts"]]
        if ids:
            break
        await asyncio.sleep(0.1)
    return ids


async def _poll_status(api: httpx.AsyncClient, prompt_id: str, wanted: str) -> str:
    status = ""
    for _ in range(100):
        status = (await api.get(f"/api/v1/agent/prompts/{prompt_id}")).json().get("status", "")
        if status == wanted:
            break
        await asyncio.sleep(0.1)
    return status


async def _wait_suspension_kept(stack: LocalStack, request_id: str) -> None:
    """Until memory holds the waiting turn's state (the engine stores it right after the
    prompt is announced)."""
    conn = await asyncpg.connect(database_url(DATABASE_SUFFIX, "postgresql"))
    try:
        for _ in range(100):
            sql = "SELECT 1 FROM agent_run_suspensions WHERE request_id = $1"
            if await conn.fetchval(sql, request_id):
                return
            await asyncio.sleep(0.1)
    finally:
        await conn.close()
    raise AssertionError("memory never kept the waiting turn's state")


def _epoch(iso: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(iso).timestamp()
