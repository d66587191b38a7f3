"""Brief outages are waited out, not failed.

On the shared stack, memory is killed just before a turn opens and started again while
the engine waits for the turn's history. On a stack of its own over a private broker,
the broker stops while an answer streams. Either way the turn completes and both its
messages are stored."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from weft_testkit import LocalStack, StackConfig, chat_requests, read_turn

from tests.private_broker import PrivateBroker

AGENT = "builtin-smart-reasoning"


async def _stored(api: httpx.AsyncClient, session_id: str) -> list[dict[str, Any]]:
    """The session's messages once both rows are there and the answer is no longer
    running (memory persists from Kafka, after its restart)."""
    messages: list[dict[str, Any]] = []
    for _ in range(300):  # up to 60 s
        resp = await api.get(f"/api/v1/sessions/{session_id}/messages")
        messages = resp.json() if resp.status_code == 200 else []
        if len(messages) == 2 and messages[1]["status"] != "running":
            break
        await asyncio.sleep(0.2)
    return messages


def _engine_retries(stack: LocalStack) -> int:
    """How many times the engine tried memory again, from its log."""
    log = stack.log_path("engine", stack.ports["engine"][0])
    return log.read_text(errors="replace").count("internal_call_retry")


async def test_a_memory_restart_while_a_turn_opens_is_waited_out(
    api: httpx.AsyncClient, stack: LocalStack, llm: httpx.AsyncClient
) -> None:  # SPEC M-08
    await llm.post("/_script", json={"steps": [{"match": "OUTAGE", "content": "still here"}]})
    resp = await api.post("/api/v1/sessions", json={"title": "outage", "agent_id": AGENT})
    assert resp.status_code == 201, resp.text
    session_id = resp.json()["id"]  # known to the gateway now: chat needs no lookup
    retries_before = _engine_retries(stack)

    stack.kill("memory")
    try:
        chat = read_turn(
            api, f"/api/v1/agent-chat/{session_id}", api_key=stack.api_key,
            json_body={"query": "OUTAGE: are you there?"}, timeout_s=120,
        )  # fmt: skip
        turn = asyncio.create_task(chat)
        for _ in range(300):  # up to 60 s: the history call meets the outage and retries
            if _engine_retries(stack) > retries_before or turn.done():
                break
            await asyncio.sleep(0.2)
    finally:
        await asyncio.to_thread(stack.start_again, "memory")
    events = await turn

    assert "error" not in [e.event for e in events], events[-2:]
    assert _engine_retries(stack) > retries_before, "the turn never met the outage"
    complete = events[-1].data["data"]
    assert complete["status"] == "completed" and complete["final_answer"] == "still here"
    user, assistant = await _stored(api, session_id)
    assert (user["role"], user["content"]) == ("user", "OUTAGE: are you there?")
    assert (assistant["content"], assistant["status"]) == ("still here", "completed")


@pytest.fixture
def stack_on_private_broker(
    private_broker: PrivateBroker, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> Iterator[LocalStack]:
    """A whole stack (one engine) whose Kafka is the test's private broker."""
    for key, value in private_broker.client_env.items():
        monkeypatch.setenv(key, value)
    with LocalStack(StackConfig(log_dir=tmp_path / "logs", partitions=1)) as running:
        yield running


async def test_a_broker_outage_mid_answer_is_waited_out_and_the_turn_completes(
    stack_on_private_broker: LocalStack, private_broker: PrivateBroker
) -> None:  # invariant 2
    """The broker stops while the engine streams an answer (its publishes and the
    consumers of every service wait) and starts again: the turn ends ``completed``, not
    ``engine_replica_lost``; the client sees every event once, in order; memory stores
    the user and the assistant message."""
    stack = stack_on_private_broker
    pieces = [f"part {i} " for i in range(40)]
    async with (
        stack.api_client() as api,
        httpx.AsyncClient(base_url=stack.llm_url, timeout=30) as llm,
    ):
        script = {"match": "KAFKA", "content": pieces, "chunk_delay_ms": 250}
        await llm.post("/_script", json={"steps": [script]})
        resp = await api.post("/api/v1/sessions", json={"title": "kafka", "agent_id": AGENT})
        assert resp.status_code == 201, resp.text
        session_id = resp.json()["id"]
        chat = read_turn(
            api, f"/api/v1/agent-chat/{session_id}", api_key=stack.api_key,
            json_body={"query": "KAFKA: stream slowly"}, timeout_s=240,
        )  # fmt: skip
        turn = asyncio.create_task(chat)
        for _ in range(600):  # up to 60 s: the model is streaming the answer
            if await chat_requests(llm) or turn.done():
                break
            await asyncio.sleep(0.1)
        await private_broker.down()
        await private_broker.up()
        events = await turn

        kinds = [e.event for e in events]
        assert "error" not in kinds, [e.data for e in events if e.event == "error"]
        complete = events[-1].data["data"]
        assert complete["status"] == "completed", complete
        assert complete["final_answer"] == "".join(pieces)
        ids = [e.data["id"] for e in events]
        seqs = [e.data["seq"] for e in events]
        assert len(set(ids)) == len(ids) and seqs == sorted(set(seqs)), seqs
        assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), f"events lost: {seqs}"
        assert kinds.count("complete") == 1
        streamed = "".join(e.data["data"]["delta"] for e in events if e.event == "final_answer")
        assert streamed == "".join(pieces), "answer deltas were lost in the outage"
        user, assistant = await _stored(api, session_id)
        assert (user["role"], user["content"]) == ("user", "KAFKA: stream slowly")
        assert assistant["content"] == "".join(pieces)
