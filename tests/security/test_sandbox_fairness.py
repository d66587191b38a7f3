"""Fair shares of the sandbox (invariant 5), as a hostile tenant would test them: tenant B
starts more long `shell_exec` commands than the sandbox has runners, all on the partition
of tenant C's session and more than that partition's read-ahead; tenant C's
`shell_exec echo` still runs and reports while every one of B's commands is still going.

The shared stack's sandbox is small for this (``SANDBOX_SHARES_ENV``: three runners, of
which one tenant holds two, and a read-ahead of two calls per partition). B's sessions
are picked so that their calls land on C's partition ahead of C's call (Kafka's default
partitioner on the session id, the record key). Before the fair consumer, the sandbox ran
plain consumers in partition order and C's call waited for all of B's sleeps; with the
fair consumer but B's backlog not parked, the partition paused at its read-ahead and C's
call was not even read. Everything is asserted as an ordering (C's result is in, none of
B's is), never a time; B's sleeps are bounded (``SLEEP_S``)."""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest
from aiokafka.partitioner import DefaultPartitioner
from redis.asyncio import Redis
from weft_contracts import Topic
from weft_testkit import LocalStack, chat_requests, read_turn

from tests.e2e.sandbox_helpers import sandbox_session
from tests.integration.kafka_helpers import kafka_access, records_so_far
from tests.stack_fixtures import SANDBOX_SHARES_ENV, ApiKeys, KeyedClient

RUNNERS = int(SANDBOX_SHARES_ENV["WEFT_SANDBOX_CONCURRENCY"])
PARTITION_READ_AHEAD = int(SANDBOX_SHARES_ENV["WEFT_SANDBOX_PARTITION_READ_AHEAD"])
FLOOD = max(RUNNERS, PARTITION_READ_AHEAD) + 1
"""B's long calls: more than the runners and than one partition's read-ahead."""
B_SHARE = RUNNERS - 1
"""Runners of the replica B may hold (the default share: all but one)."""
SLEEP_S = 10
"""B's commands are bounded: the test waits for them all in the end (two rounds of B's
share), which proves the calls parked past the read-ahead are read again and run."""


def _shell(command: str) -> list[dict[str, Any]]:
    return [{"id": "call_sh", "name": "shell_exec", "arguments": {"command": command}}]


def _partition(session_id: str, partitions: int) -> int:
    """The partition Kafka's default partitioner gives a record keyed by the session."""
    every = list(range(partitions))
    return int(DefaultPartitioner()(session_id.encode(), every, every))


async def _sessions_on(client: KeyedClient, partition: int, partitions: int) -> list[str]:
    """``FLOOD`` new sandbox sessions of ``client`` whose calls land on ``partition``."""
    found: list[str] = []
    for i in range(FLOOD * partitions * 10):
        sid = await sandbox_session(client.http, f"flood{i}")
        if _partition(sid, partitions) == partition:
            found.append(sid)
            if len(found) == FLOOD:
                return found
    raise AssertionError("no sessions landed on C's partition")


async def _turn(client: KeyedClient, session_id: str, query: str) -> list[Any]:
    return await read_turn(
        client.http, f"/api/v1/agent-chat/{session_id}", api_key=client.key,
        json_body={"query": query}, timeout_s=120,
    )  # fmt: skip


async def _until(what: str, check: Callable[[], Awaitable[bool]], tries: int = 300) -> None:
    """Wait until ``check()`` holds (polled every 0.2 s)."""
    for _ in range(tries):
        if await check():
            return
        await asyncio.sleep(0.2)
    assert await check(), what


@pytest.mark.kafka
async def test_a_tenant_flooding_the_sandbox_cannot_hold_back_another_tenants_command(
    stack: LocalStack, api_keys: ApiKeys, llm: httpx.AsyncClient, infra: dict[str, str]
) -> None:
    tenant_b, tenant_c = f"sbflood-{secrets.token_hex(4)}", f"sbquiet-{secrets.token_hex(4)}"
    flooder, quiet = await api_keys.client(tenant=tenant_b), await api_keys.client(tenant=tenant_c)
    c_session = await sandbox_session(quiet.http, "quiet")
    partitions = stack.config.partitions
    b_sessions = await _sessions_on(flooder, _partition(c_session, partitions), partitions)
    steps = [{"match": "SBFLOOD", "tool_calls": _shell(f"sleep {SLEEP_S}")}] * FLOOD
    steps += [{"match": "SBFLOOD", "content": "slept"}] * FLOOD
    steps += [{"match": "SBQUIET", "tool_calls": _shell("echo quiet-ran")},
              {"match": "SBQUIET", "content": "echoed"}]  # fmt: skip
    assert (await llm.post("/_script", json={"steps": steps})).status_code == 200
    access = kafka_access(infra)
    calls_topic = stack.prefix + Topic.SANDBOX_CALLS.value
    results_topic = stack.prefix + Topic.TOOL_RESULTS.value
    redis = Redis.from_url(infra["WEFT_REDIS_URL"])
    b_slots = f"weft:slots:{stack.prefix}sandbox:{tenant_b}"

    async def b_calls_logged() -> bool:
        logged = await records_so_far(access, [calls_topic])
        return len([r for r in logged if r.get("tenant_id") == tenant_b]) >= FLOOD

    async def b_running() -> bool:
        return int(await redis.zcard(b_slots)) == B_SHARE

    flood = [
        asyncio.create_task(_turn(flooder, sid, f"SBFLOOD {i}")) for i, sid in enumerate(b_sessions)
    ]
    try:
        # Every one of B's calls is in the log ahead of C's, and B holds its share.
        await _until("B's calls never reached the sandbox topic", b_calls_logged)
        await _until("B's calls never took their runners", b_running)

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
        assert int(await redis.zcard(b_slots)) == B_SHARE, "B ran past its share"
        asked = [r for r in await chat_requests(llm) if "SBFLOOD" in json.dumps(r)]
        assert len(asked) == FLOOD  # each of B's turns made its call, none got back

        # B loses nothing: its parked calls are read again from Kafka and every one runs.
        try:
            b_turns = await asyncio.wait_for(asyncio.gather(*flood), timeout=4 * SLEEP_S * FLOOD)
        except TimeoutError:
            raise AssertionError("a call of B parked past the read-ahead never ran") from None
        for events in b_turns:
            b_results = [e.data["data"] for e in events if e.event == "tool_result"]
            assert len(b_results) == 1 and b_results[0]["success"], b_results
            assert events[-1].data["data"]["final_answer"] == "slept"
    finally:
        for task in flood:
            task.cancel()
        await asyncio.gather(*flood, return_exceptions=True)
        await redis.aclose()
