"""Approvals: how fast a decision becomes a dispatched tool call, and what waiting costs.

1. Decision -> dispatch: sequential turns of an agent whose one tool (``thinking``) is
   "always ask"; at each prompt, once memory has recorded it (as it has long before any
   person answers), the bench POSTs an approval to the gateway and times until
   the call's ``ToolCallRequested`` is on ``weft.tool.calls.v1`` (a consumer with a 5 ms
   fetch wait reads it, so the consumer's pacing is not what is measured). The path:
   gateway -> memory (records the decision) -> Kafka ``agent.control`` -> an engine
   replica -> Kafka ``tool.calls``.
2. Waiting prompts: ``--waiting`` turns are left waiting for a person; the RSS of the
   engine and memory processes, Redis's ``used_memory`` and PostgreSQL's bytes of the
   approval tables are read before and after, and scaled to 10,000 waiting prompts.

The stack has its own PostgreSQL database (dropped at the end) and Redis database 10
(emptied at start and end), so the bench leaves nothing in the shared ones.

    .venv/bin/python bench/approvals.py [--latency-turns 60] [--waiting 1000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import asyncpg
import httpx
from aiokafka import AIOKafkaConsumer
from benchlib import machine, save, summary
from httpx_sse import aconnect_sse
from redis.asyncio import Redis
from weft_contracts import Topic
from weft_testkit import LocalStack, StackConfig, infra_env
from weft_testkit.kafka import client_options
from weft_testkit.own_infra import create_database, database_url, drop_database, redis_url

REPO = Path(__file__).resolve().parents[1]
REDIS_DB = 10
DATABASE_SUFFIX = "_bench_approvals"
TOOL_ARGUMENTS = {"thought": "check", "next_thought_needed": False, "thought_number": 1,
                  "total_thoughts": 1}  # fmt: skip
SCRIPT = {"fallback": "rounds", "rounds": 1, "parallel": 1, "rounds_tool": "thinking",
          "rounds_arguments": TOOL_ARGUMENTS, "rounds_answer": "ok"}  # fmt: skip
ENV = {
    "WEFT_MAX_CONCURRENT_TURNS": "100000",
    "WEFT_RATE_LIMIT_PER_MINUTE": "0",
    "WEFT_TURN_TENANT_MAX_INFLIGHT": "0",
    "WEFT_SSE_MAX_PER_TENANT": "100000",
}


def _redis_url() -> str:
    return redis_url(REDIS_DB)


async def _agent(api: httpx.AsyncClient) -> str:
    body = {"name": "bench-approvals", "mode": "smart-reasoning", "allowed_tools": ["thinking"],
            "always_ask_tools": ["thinking"], "approval_timeout_s": 7 * 24 * 3600,
            "max_iterations": 4}  # fmt: skip
    made = await api.post("/api/v1/agents", json=body)
    made.raise_for_status()
    return str(made.json()["id"])


async def _ask(api: httpx.AsyncClient, agent: str) -> tuple[str, str, str]:
    """A new session's turn, read until its prompt: (session, prompt id, call id)."""
    session = await api.post("/api/v1/sessions", json={"agent_id": agent})
    session.raise_for_status()
    sid = str(session.json()["id"])
    url = f"/api/v1/agent-chat/{sid}"
    async with aconnect_sse(api, "POST", url, json={"query": "go"}, timeout=120) as source:
        async for sse in source.aiter_sse():
            if sse.event == "tool_approval_required":
                data = json.loads(sse.data)["data"]
                return sid, data["prompt_id"], data["call_id"]
    raise RuntimeError("the turn ended without asking")


class Calls:
    """Arrival times of tool calls on ``tool.calls``, by call id."""

    def __init__(self, stack: LocalStack):
        self.seen: dict[str, float] = {}
        self.waiters: dict[str, asyncio.Future[float]] = {}
        self.consumer = AIOKafkaConsumer(
            stack.prefix + Topic.TOOL_CALLS.value, **client_options(infra_env()),
            group_id=None, auto_offset_reset="latest", fetch_max_wait_ms=5,
        )  # fmt: skip

    async def follow(self) -> None:
        async for record in self.consumer:
            at = time.perf_counter()
            call_id = json.loads(record.value)["data"]["call_id"]
            self.seen[call_id] = at
            waiter = self.waiters.pop(call_id, None)
            if waiter is not None and not waiter.done():
                waiter.set_result(at)

    async def arrival(self, call_id: str) -> float:
        if call_id in self.seen:
            return self.seen[call_id]
        future = self.waiters.setdefault(call_id, asyncio.get_running_loop().create_future())
        return await asyncio.wait_for(future, 30)


async def _recorded(api: httpx.AsyncClient, prompt_id: str) -> None:
    """Until memory has recorded the prompt (it reads ``agent.events`` with a linger, so a
    client as fast as this bench answers before that; a person never does)."""
    for _ in range(1000):
        if (await api.get(f"/api/v1/agent/prompts/{prompt_id}")).status_code == 200:
            return
        await asyncio.sleep(0.01)
    raise RuntimeError(f"memory never recorded prompt {prompt_id}")


async def _latency(api: httpx.AsyncClient, agent: str, calls: Calls, turns: int) -> dict[str, Any]:
    dispatch, answered = [], []
    for _ in range(turns):
        _, prompt_id, call_id = await _ask(api, agent)
        await _recorded(api, prompt_id)
        started = time.perf_counter()
        resp = await api.post(f"/api/v1/agent/prompts/{prompt_id}", json={"decision": "approve"})
        resp.raise_for_status()
        answered.append((time.perf_counter() - started) * 1000)
        dispatch.append((await calls.arrival(call_id) - started) * 1000)
    return {"decision_to_dispatch_ms": summary(dispatch),
            "decision_http_ms": summary(answered)}  # fmt: skip


def _rss_mb(stack: LocalStack, name: str) -> float:
    total = 0
    for pid in stack.pids(name):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                total += int(line.split()[1])
    return round(total / 1024, 1)


async def _footprint(stack: LocalStack, redis: Redis) -> dict[str, float]:
    info = await redis.info("memory")
    conn = await asyncpg.connect(database_url(DATABASE_SUFFIX, "postgresql"))
    try:
        pg = await conn.fetchval(
            "SELECT pg_total_relation_size('agent_prompts') "
            "+ pg_total_relation_size('agent_run_suspensions')"
        )
    finally:
        await conn.close()
    return {
        "engine_rss_mb": _rss_mb(stack, "engine"),
        "memory_rss_mb": _rss_mb(stack, "memory"),
        "redis_used_mb": round(int(info["used_memory"]) / 2**20, 1),
        "postgres_approval_tables_mb": round(int(pg) / 2**20, 1),
    }


async def _waiting(api: httpx.AsyncClient, agent: str, count: int, parallel: int) -> float:
    gate = asyncio.Semaphore(parallel)

    async def one() -> None:
        async with gate:
            await _ask(api, agent)

    started = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(count)))
    return time.perf_counter() - started


async def run(args: argparse.Namespace) -> dict[str, Any]:
    await create_database(DATABASE_SUFFIX, fresh=True)
    redis = Redis.from_url(_redis_url())
    await redis.flushdb()
    home = Path(os.environ.get("WEFT_HOME", REPO / ".weft"))
    config = StackConfig(
        log_dir=home / "logs" / "bench-approvals", redis_url=_redis_url(),
        database_url=database_url(DATABASE_SUFFIX), extra_env=ENV,
    )  # fmt: skip
    before_load = machine()
    try:
        with LocalStack(config) as stack:
            async with (
                httpx.AsyncClient(base_url=stack.llm_url, timeout=30) as llm,
                stack.api_client(timeout=120) as api,
            ):
                (await llm.post("/_script", json=SCRIPT)).raise_for_status()
                agent = await _agent(api)
                calls = Calls(stack)
                await calls.consumer.start()
                following = asyncio.create_task(calls.follow())
                try:
                    await _latency(api, agent, calls, 5)  # warm-up
                    latency = await _latency(api, agent, calls, args.latency_turns)
                    idle = await _footprint(stack, redis)
                    took = await _waiting(api, agent, args.waiting, args.parallel)
                    await asyncio.sleep(3)  # memory records behind Kafka
                    loaded = await _footprint(stack, redis)
                finally:
                    following.cancel()
                    await calls.consumer.stop()
    finally:
        await redis.flushdb()
        await redis.aclose()
        await drop_database(DATABASE_SUFFIX)
    scale = 10_000 / args.waiting
    per_10k = {k: round((loaded[k] - idle[k]) * scale, 1) for k in idle}
    return {
        "date": datetime.now().isoformat(timespec="seconds"),
        "machine_before": before_load,
        "machine_after": machine(),
        **latency,
        "waiting_prompts": args.waiting,
        "waiting_started_per_s": round(args.waiting / took, 1),
        "footprint_idle": idle,
        "footprint_waiting": loaded,
        "per_10000_waiting_mb": per_10k,
        "note": f"measured with {args.waiting} waiting prompts"
        + ("" if args.waiting == 10_000 else ", scaled linearly to 10,000"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency-turns", type=int, default=60)
    parser.add_argument("--waiting", type=int, default=1000)
    parser.add_argument("--parallel", type=int, default=24)
    result = asyncio.run(run(parser.parse_args()))
    save(f"approvals-{datetime.now():%Y%m%d-%H%M}", result)


if __name__ == "__main__":
    main()
