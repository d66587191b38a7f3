"""Fair shares of the sandbox (invariant 5), as a hostile tenant would test them: tenant B
starts more long `shell_exec` commands than the sandbox has runners and than one
partition's read-ahead holds; tenant C's `shell_exec echo` still runs and reports while
every one of B's commands is still going.

The stack is its own, small enough that the attack is cheap: one partition per topic (so
B's calls and C's share a partition, C's behind all of B's), two sandbox runners, B capped
at one call at a time, and a partition read-ahead of two. Before the fair consumer, the
sandbox ran plain consumers in partition order: C's call waited for all of B's sleeps.
Everything is asserted as an ordering (C's result is in, none of B's is), never a time;
B's sleeps are bounded, and the stack's teardown ends them."""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest
from redis.asyncio import Redis
from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine
from weft_contracts import Topic
from weft_gateway.auth import ApiKeyAuth
from weft_testkit import LocalStack, StackConfig, chat_requests, read_turn

from tests.e2e.sandbox_helpers import sandbox_session
from tests.integration.kafka_helpers import kafka_access, records_so_far
from tests.stack_fixtures import ApiKeys, KeyedClient

LOG_DIR = Path(".weft/logs/e2e-sandbox-fair")
RUNNERS = 2
PARTITION_READ_AHEAD = 2
FLOOD = 4
"""B's long calls: more than the runners (2) and than one partition's read-ahead (2)."""
SLEEP_S = 25
"""B's commands are bounded: a run that goes wrong still ends."""


@pytest.fixture(scope="module")
def fair_sandbox_stack(infra: dict[str, str]) -> Iterator[LocalStack]:
    config = StackConfig(
        log_dir=LOG_DIR,
        partitions=1,
        extra_env={
            "WEFT_SANDBOX_CONCURRENCY": str(RUNNERS),
            "WEFT_SANDBOX_TENANT_MAX_INFLIGHT": "1",
            "WEFT_SANDBOX_READ_AHEAD": str(PARTITION_READ_AHEAD),
            "WEFT_SANDBOX_PARTITION_READ_AHEAD": str(PARTITION_READ_AHEAD),
        },
    )
    with LocalStack(config) as running:
        yield running


@pytest.fixture
async def keys(fair_sandbox_stack: LocalStack, infra: dict[str, str]) -> AsyncIterator[ApiKeys]:
    engine = create_async_engine(infra["WEFT_DATABASE_URL"])
    try:
        async with AsyncExitStack() as clients:
            yield ApiKeys(fair_sandbox_stack, ApiKeyAuth(async_sessionmaker(engine)), clients)
    finally:
        await engine.dispose()


def _shell(command: str) -> list[dict[str, Any]]:
    return [{"id": "call_sh", "name": "shell_exec",
             "arguments": {"command": command, "timeout_sec": SLEEP_S + 10}}]  # fmt: skip


async def _turn(client: KeyedClient, session_id: str, query: str) -> list[Any]:
    return await read_turn(
        client.http, f"/api/v1/agent-chat/{session_id}", api_key=client.key,
        json_body={"query": query}, timeout_s=120,
    )  # fmt: skip


async def _until(what: str, check: Any, tries: int = 300) -> None:
    """Wait until ``check()`` holds (polled every 0.2 s)."""
    for _ in range(tries):
        if await check():
            return
        await asyncio.sleep(0.2)
    assert await check(), what


@pytest.mark.kafka
async def test_a_tenant_flooding_the_sandbox_cannot_hold_back_another_tenants_command(
    fair_sandbox_stack: LocalStack, keys: ApiKeys, infra: dict[str, str]
) -> None:
    stack = fair_sandbox_stack
    tenant_b, tenant_c = f"sbflood-{secrets.token_hex(4)}", f"sbquiet-{secrets.token_hex(4)}"
    flooder, quiet = await keys.client(tenant=tenant_b), await keys.client(tenant=tenant_c)
    b_sessions = [await sandbox_session(flooder.http, f"flood{i}") for i in range(FLOOD)]
    c_session = await sandbox_session(quiet.http, "quiet")
    steps = [{"match": "SBFLOOD", "tool_calls": _shell(f"sleep {SLEEP_S}")}] * FLOOD
    steps += [{"match": "SBFLOOD", "content": "slept"}] * FLOOD
    steps += [{"match": "SBQUIET", "tool_calls": _shell("echo quiet-ran")},
              {"match": "SBQUIET", "content": "echoed"}]  # fmt: skip
    access = kafka_access(infra)
    calls_topic = stack.prefix + Topic.SANDBOX_CALLS.value
    results_topic = stack.prefix + Topic.TOOL_RESULTS.value
    redis = Redis.from_url(infra["WEFT_REDIS_URL"])
    b_slots = f"weft:slots:{stack.prefix}sandbox:{tenant_b}"
    async with httpx.AsyncClient(base_url=stack.llm_url, timeout=30) as llm:
        assert (await llm.post("/_script", json={"steps": steps})).status_code == 200
        flood = [
            asyncio.create_task(_turn(flooder, sid, f"SBFLOOD {i}"))
            for i, sid in enumerate(b_sessions)
        ]
        try:

            async def b_calls_logged() -> bool:
                logged = await records_so_far(access, [calls_topic])
                return sum(r.get("tenant_id") == tenant_b for r in logged) >= FLOOD

            async def b_running() -> bool:
                return bool(await redis.zcard(b_slots))

            # Every one of B's calls is in the log ahead of C's, and B's first one runs.
            await _until("B's calls never reached the sandbox topic", b_calls_logged)
            await _until("B's first call never started", b_running)

            c_events = await _turn(quiet, c_session, "SBQUIET please")
            results = [e.data["data"] for e in c_events if e.event == "tool_result"]
            assert len(results) == 1 and results[0]["success"], results
            assert "quiet-ran" in results[0]["output"], results[0]
            assert c_events[-1].data["data"]["final_answer"] == "echoed"

            # The ordering: C's result is in while none of B's is.
            logged = await records_so_far(access, [results_topic])
            assert not [r for r in logged if r.get("tenant_id") == tenant_b], (
                "one of B's commands ended before C's result: C waited behind B's"
            )
            assert not any(t.done() for t in flood), "a turn of B ended before C's"
            assert await redis.zcard(b_slots) == 1, "B ran past its cap"
            asked = [r for r in await chat_requests(llm) if "SBFLOOD" in json.dumps(r)]
            assert len(asked) == FLOOD  # each of B's turns made its call, none got back
        finally:
            for task in flood:
                task.cancel()
            await asyncio.gather(*flood, return_exceptions=True)
            await llm.post("/_reset")
            await redis.aclose()
