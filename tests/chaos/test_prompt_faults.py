"""Faults while people are asked (SPEC H-02, H-03, invariant 2): turns wait for a decision
when an engine replica is SIGKILLed, or Redis is killed with its data deleted; afterwards
every waiting turn continues after its decision (approved by a person) or its expiry (the
durable timer), with exactly one ``complete``, every event once and in ``seq`` order, and
never ``turn_state_lost``.

The turns use an agent whose one tool, ``thinking``, is marked "always ask": each turn's
round of two calls asks twice. Half the sessions are approved after the fault, half are
left to expire (their agent's timeout is 10 s). Events are read back from
``agent.events`` on the suite's private broker.

Size: ``WEFT_CHAOS_PROMPT_SESSIONS`` sessions per fault (``make test``: 4, both faults;
``make test-full``: 20).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from aiokafka import AIOKafkaConsumer
from httpx_sse import aconnect_sse
from weft_contracts import Topic
from weft_testkit import LocalStack, infra_env
from weft_testkit.kafka import client_options

from tests.chaos.conftest import TOOL, PrivateInfra, chaos_home
from tests.chaos.test_faults import _all_ready

SESSIONS = int(os.environ.get("WEFT_CHAOS_PROMPT_SESSIONS", "4"))
EXPIRY_S = 10
SETTLE_S = 150.0


def _kill_engine(stack: LocalStack, _: PrivateInfra) -> None:
    stack.kill("engine", 0, signal.SIGKILL)


def _wipe_redis(stack: LocalStack, infra: PrivateInfra) -> None:
    os.kill(infra.pid("redis"), signal.SIGKILL)
    infra.wipe_redis_data()


FAULTS: dict[str, tuple[Callable[..., None], Callable[..., None]]] = {
    "engine": (_kill_engine, lambda stack, _: stack.start_again("engine", 0)),
    "redis": (_wipe_redis, lambda _, infra: infra.run("up", "redis")),
}


async def _agent(api: httpx.AsyncClient, timeout_s: int) -> str:
    body = {"name": f"ask-{timeout_s}", "mode": "smart-reasoning", "allowed_tools": [TOOL],
            "always_ask_tools": [TOOL], "max_iterations": 6,
            "approval_timeout_s": timeout_s}  # fmt: skip
    made = await api.post("/api/v1/agents", json=body)
    made.raise_for_status()
    return str(made.json()["id"])


async def _ask(api: httpx.AsyncClient, agent: str, tag: str) -> tuple[str, list[str]]:
    """Start a turn and read its stream until both of its calls ask: its request id and
    prompt ids."""
    session = await api.post("/api/v1/sessions", json={"agent_id": agent})
    session.raise_for_status()
    url = f"/api/v1/agent-chat/{session.json()['id']}"
    request_id, prompts = "", []
    async with aconnect_sse(api, "POST", url, json={"query": tag}, timeout=60) as source:
        async for sse in source.aiter_sse():
            if not sse.data:
                continue
            event = json.loads(sse.data)
            request_id = request_id or event.get("request_id", "")
            if sse.event == "tool_approval_required":
                prompts.append(event["data"]["prompt_id"])
            if len(prompts) == 2 or sse.event == "complete":
                break
    return request_id, prompts


async def _approve(api: httpx.AsyncClient, prompt_id: str) -> None:
    """Approve, retried while the stack comes back."""
    deadline = time.monotonic() + 60
    while True:
        try:
            resp = await api.post(
                f"/api/v1/agent/prompts/{prompt_id}", json={"decision": "approve"}
            )
            if resp.status_code == 200:
                return
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, f"prompt {prompt_id} could not be approved"
        await asyncio.sleep(0.5)


async def _turn_events(prefix: str, request_ids: set[str]) -> dict[str, list[dict[str, Any]]]:
    """Every event of the turns, until each has its ``complete`` (or ``SETTLE_S``)."""
    consumer = AIOKafkaConsumer(
        prefix + Topic.AGENT_EVENTS.value, **client_options(infra_env()), group_id=None,
        auto_offset_reset="earliest", enable_auto_commit=False,
    )  # fmt: skip
    await consumer.start()
    found: dict[str, list[dict[str, Any]]] = {rid: [] for rid in request_ids}
    done: set[str] = set()
    try:
        with_deadline = asyncio.timeout(SETTLE_S)
        async with with_deadline:
            async for record in consumer:
                event = json.loads(record.value)
                rid = event["request_id"]
                if rid in found:
                    found[rid].append(event)
                    if event["type"] == "complete":
                        done.add(rid)
                if done == request_ids:
                    break
    except TimeoutError:
        pass
    finally:
        await consumer.stop()
    return found


def _problems(delivered: list[dict[str, Any]], expired: bool) -> list[str]:
    """What is wrong with one turn's events. Kafka delivers at least once: an event a
    replica published and then died before it knew (the outbox publishes it again, same
    id) is one event; two different events with one seq are a finding."""
    found = []
    events = list({e["id"]: e for e in delivered}.values())
    seqs = [e["seq"] for e in events]
    if seqs != list(range(1, len(seqs) + 1)):
        found.append(f"seqs {seqs}")
    kinds = [e["type"] for e in events]
    if kinds.count("complete") != 1:
        found.append(f"{kinds.count('complete')} completes")
    if "error" in kinds:
        found.append(f"error {[e['data'] for e in events if e['type'] == 'error']}")
    outcomes = sorted(e["data"]["outcome"] for e in events if e["type"] == "tool_approval_resolved")
    wanted = ["timeout", "timeout"] if expired else ["approved", "approved"]
    if outcomes != wanted:
        found.append(f"outcomes {outcomes}")
    results = [e["data"] for e in events if e["type"] == "tool_result"]
    if len(results) != 2 or any(r["success"] == expired for r in results):
        found.append(f"results {results}")
    return found


@pytest.mark.timeout(600)
@pytest.mark.parametrize("fault", sorted(FAULTS))
async def test_every_waiting_turn_continues_after_its_decision_or_expiry(
    fault: str, chaos_stack: LocalStack, private_infra: PrivateInfra, api: httpx.AsyncClient
) -> None:
    await _all_ready(chaos_stack)
    quick, patient = await _agent(api, EXPIRY_S), await _agent(api, 600)
    half = max(1, SESSIONS // 2)
    asked = await asyncio.gather(
        *(_ask(api, quick if i < half else patient, f"PROMPT-CHAOS {fault} {i}")
          for i in range(SESSIONS))
    )  # fmt: skip
    assert all(len(prompts) == 2 for _, prompts in asked), asked
    inject, recover = FAULTS[fault]
    fault_at = time.monotonic()
    await asyncio.to_thread(inject, chaos_stack, private_infra)
    await asyncio.sleep(3)
    await asyncio.to_thread(recover, chaos_stack, private_infra)
    await asyncio.gather(*(_approve(api, p) for _, prompts in asked[half:] for p in prompts))
    request_ids = {rid for rid, _ in asked}
    events = await _turn_events(chaos_stack.prefix, request_ids)
    problems = {
        rid: found
        for i, (rid, _) in enumerate(asked)
        if (found := _problems(events[rid], expired=i < half))
    }
    result = {
        "fault": fault, "sessions": SESSIONS, "expired": half, "approved": SESSIONS - half,
        "settled_s": round(time.monotonic() - fault_at, 1), "problems": problems,
        "load_average": os.getloadavg(),
    }  # fmt: skip
    folder = chaos_home() / "chaos"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"prompts-{fault}.json").write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))
    assert not problems, json.dumps(problems, indent=2)[:6000]
