"""A Redis restart under an idle stack fails no request (issue "reconnect, not fail").

Every service keeps pooled Redis connections. After Redis is killed and started again,
each of them is dead; before ``weft_platform.redis_client``, the first command on each one
failed, so a burst of requests twenty seconds later got one 503 per pooled connection. Here
the pools are filled by a first burst, Redis is killed (SIGKILL) and started again, and a
second burst of the same requests, plus a few turns, must all succeed at the first try.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal

import httpx
from weft_testkit import LocalStack

from tests.chaos.conftest import PrivateInfra
from tests.chaos.test_faults import _all_ready

BURST = 50
TURNS = 4


async def _burst(api: httpx.AsyncClient, agent: str) -> list[str]:
    """Create ``BURST`` sessions at once and read each one's messages; every answer must
    be a success. Returns the sessions' ids."""
    created = await asyncio.gather(
        *(api.post("/api/v1/sessions", json={"agent_id": agent}) for _ in range(BURST))
    )
    failed = [
        f"POST /sessions {r.status_code}: {r.text[:200]}" for r in created if r.status_code != 201
    ]
    assert not failed, failed
    sessions = [str(r.json()["id"]) for r in created]
    pages = await asyncio.gather(*(api.get(f"/api/v1/sessions/{s}/messages") for s in sessions))
    failed = [
        f"GET messages {r.status_code}: {r.text[:200]}" for r in pages if r.status_code != 200
    ]
    assert not failed, failed
    return sessions


async def _turn(api: httpx.AsyncClient, session_id: str) -> str:
    """One turn, sent once: the POST must be accepted and the stream end in ``complete``;
    returns the completion's status."""
    path = f"/api/v1/agent-chat/{session_id}"
    async with api.stream("POST", path, json={"query": "after the restart"}) as response:
        assert response.status_code == 200, (response.status_code, await response.aread())
        event = ""
        async for line in response.aiter_lines():
            if line.startswith("event:"):
                event = line.removeprefix("event:").strip()
            elif line.startswith("data:") and event == "complete":
                return str(json.loads(line.removeprefix("data:"))["data"]["status"])
    raise AssertionError("the stream ended without complete")


async def test_a_redis_restart_fails_no_request(
    chaos_stack: LocalStack, private_infra: PrivateInfra, chaos_agent: str
) -> None:
    await _all_ready(chaos_stack)
    async with chaos_stack.api_client(timeout=60) as api:
        before = await _burst(api, chaos_agent)  # fills every service's Redis pool
        assert await _turn(api, before[0]) == "completed"

        os.kill(private_infra.pid("redis"), signal.SIGKILL)
        await asyncio.to_thread(private_infra.run, "up", "redis")

        sessions = await _burst(api, chaos_agent)
        statuses = await asyncio.gather(*(_turn(api, s) for s in sessions[:TURNS]))
        assert statuses == ["completed"] * TURNS, statuses
