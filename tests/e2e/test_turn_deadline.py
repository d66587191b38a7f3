"""The turn deadline through the whole stack (SPEC E-20): an engine started with a short
``WEFT_TURN_DEADLINE_S`` ends a turn whose model round outlived it at the next round,
with a rescue answer from the tool results or, with none, ``error``
``turn_deadline_exceeded``. The model rounds' ``delay_ms`` is the scripted LLM's; its
request log shows what the model was asked."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from weft_engine.loop import DEADLINE_REASON, TURN_DEADLINE
from weft_testkit import LocalStack, SseEvent, StackConfig, chat_requests, read_turn

from tests.stack_fixtures import stack_log_dir

DEADLINE_S = 4
OUTLIVES_IT_MS = (DEADLINE_S + 1) * 1000
THINK = {
    "name": "thinking",
    "arguments": {"thought": "step", "next_thought_needed": True, "thought_number": 1,
                  "total_thoughts": 3},
}  # fmt: skip


@pytest.fixture(scope="module")
def short_deadline_stack(infra: dict[str, str]) -> Iterator[LocalStack]:
    config = StackConfig(
        log_dir=stack_log_dir("e2e-turn-deadline"),
        extra_env={"WEFT_TURN_DEADLINE_S": str(DEADLINE_S)},
    )
    with LocalStack(config) as running:
        yield running


@pytest.fixture
async def api(short_deadline_stack: LocalStack) -> AsyncIterator[httpx.AsyncClient]:
    async with short_deadline_stack.api_client() as client:
        yield client


@pytest.fixture
async def llm(short_deadline_stack: LocalStack) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=short_deadline_stack.llm_url, timeout=30) as c:
        await c.post("/_reset")
        yield c
        await c.post("/_reset")


async def _turn(
    api: httpx.AsyncClient, stack: LocalStack, query: str, tools: list[str]
) -> list[SseEvent]:
    body = {"name": "deadline", "kb_selection_mode": "none", "allowed_tools": tools}
    agent = await api.post("/api/v1/agents", json=body)
    assert agent.status_code == 201, agent.text
    session = await api.post("/api/v1/sessions", json={"agent_id": agent.json()["id"]})
    assert session.status_code == 201, session.text
    return await read_turn(
        api, f"/api/v1/agent-chat/{session.json()['id']}", api_key=stack.api_key,
        json_body={"query": query},
    )  # fmt: skip


def _complete(events: list[SseEvent]) -> dict[str, Any]:
    assert [e.event for e in events].count("complete") == 1 and events[-1].event == "complete"
    data: dict[str, Any] = events[-1].data["data"]
    return data


async def test_a_turn_past_its_deadline_answers_from_its_tool_results(
    api: httpx.AsyncClient, short_deadline_stack: LocalStack, llm: httpx.AsyncClient
) -> None:  # SPEC E-20: rescue synthesis when tool results exist
    await llm.post("/_script", json={"steps": [
        {"match": "SLOWTOOL", "tool_calls": [THINK], "delay_ms": OUTLIVES_IT_MS},
        {"match": "ran out of time", "content": "Rescued before the clock."},
    ]})  # fmt: skip
    events = await _turn(api, short_deadline_stack, "SLOWTOOL please", ["thinking"])
    complete = _complete(events)
    assert (complete["status"], complete["final_answer"]) == (
        "completed", "Rescued before the clock.",
    )  # fmt: skip
    assert [e.event for e in events].count("tool_result") == 1
    first, closing = await chat_requests(llm)  # no second thinking round
    assert first["tools"] and "tool_choice" not in first  # a thinking round
    assert closing["tool_choice"] == "none" and DEADLINE_REASON in str(closing["messages"])


async def test_a_turn_past_its_deadline_without_results_fails_with_its_code(
    api: httpx.AsyncClient, short_deadline_stack: LocalStack, llm: httpx.AsyncClient
) -> None:  # SPEC E-20: nothing gathered, so the stable error code
    await llm.post("/_script", json={"steps": [
        {"match": "SLOWEMPTY", "content": "", "delay_ms": OUTLIVES_IT_MS},
    ]})  # fmt: skip
    events = await _turn(api, short_deadline_stack, "SLOWEMPTY please", [])
    [error] = [e.data["data"] for e in events if e.event == "error"]
    assert (error["code"], error["message"]) == ("turn_deadline_exceeded", TURN_DEADLINE)
    assert _complete(events)["status"] == "failed"
    assert len(await chat_requests(llm)) == 1  # the empty answer's nudge was never sent
