"""The engine opens no database (docs/architecture.md, "Data ownership"): its state is in
Redis and the tenant's token budget comes with the turn (``ChatRequested.data.budget``).
An engine whose ``WEFT_DATABASE_URL`` names a closed port starts, is ready, and runs a
turn to its answer."""

from __future__ import annotations

import asyncio
import signal
import socket

import httpx
import pytest
from weft_testkit import LocalStack, read_turn

pytestmark = pytest.mark.kafka


def _closed_port() -> int:
    """A port nothing listens on (bound, then released without listening)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def test_an_engine_without_a_reachable_database_runs_a_turn(
    stack: LocalStack, api: httpx.AsyncClient, llm: httpx.AsyncClient
) -> None:
    nowhere = f"postgresql+asyncpg://weft:weft@127.0.0.1:{_closed_port()}/weft"
    assert stack.kill("engine", 0, signal.SIGTERM) in (0, -signal.SIGTERM)
    await asyncio.to_thread(
        stack.start_again, "engine", 0, {"WEFT_DATABASE_URL": nowhere}
    )  # waits for /readyz
    port = stack.ports["engine"][0]
    async with httpx.AsyncClient() as client:
        ready = (await client.get(f"http://127.0.0.1:{port}/readyz")).json()
    assert ready["status"] == "ready" and "postgres" not in ready["checks"], ready
    steps = [{"match": "no database", "content": "Answered without a database."}]
    assert (await llm.post("/_script", json={"steps": steps})).status_code == 200
    body = {"name": "no database", "allowed_tools": [], "kb_selection_mode": "none"}
    agent = await api.post("/api/v1/agents", json=body)
    assert agent.status_code == 201, agent.text
    made = await api.post("/api/v1/sessions", json={"agent_id": agent.json()["id"]})
    assert made.status_code == 201, made.text
    session = made.json()
    events = await read_turn(
        api, f"/api/v1/agent-chat/{session['id']}", api_key=stack.api_key,
        json_body={"query": "Answer with no database, please."},
    )  # fmt: skip
    final = events[-1].data["data"]
    assert final["status"] == "completed", final
    assert "Answered without a database." in final["final_answer"]
