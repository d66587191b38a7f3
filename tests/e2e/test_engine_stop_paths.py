"""Stop paths of the loop that end a turn without a natural answer (SPEC E-07, E-20, E-21),
through the whole stack: gateway -> Kafka -> engine -> the scripted LLM over HTTP with the
``openai`` client. The test double's request log shows what the model was asked.

- max iterations: one closing synthesis without tools and with thinking off;
- transient model errors: retried twice with backoff, then the turn fails with
  ``llm_error``, or, when tools already gave results, answers from them (rescue);
- an empty answer: nudged twice without consuming a round, then the fixed fallback.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
from weft_engine.analyze import (
    CONTENT_FILTER_APOLOGY,
    EMPTY_FALLBACK,
    LENGTH_EXHAUSTED,
    LENGTH_NUDGE,
    NUDGE,
)
from weft_engine.finalize import MODEL_UNAVAILABLE
from weft_testkit import LocalStack, SseEvent, chat_requests, read_turn

THINK = {
    "name": "thinking",
    "arguments": {"thought": "step", "next_thought_needed": True, "thought_number": 1,
                  "total_thoughts": 3},
}  # fmt: skip
OVERLOADED = {"error": {"status": 503, "message": "overloaded"}}


async def _agent(api: httpx.AsyncClient, **fields: Any) -> str:
    body = {"name": "stop paths", "kb_selection_mode": "none", "allowed_tools": [], **fields}
    resp = await api.post("/api/v1/agents", json=body)
    assert resp.status_code == 201, resp.text
    return str(resp.json()["id"])


async def _turn(
    api: httpx.AsyncClient, stack: LocalStack, agent: str, query: str
) -> list[SseEvent]:
    session = await api.post("/api/v1/sessions", json={"agent_id": agent})
    assert session.status_code == 201, session.text
    return await read_turn(
        api, f"/api/v1/agent-chat/{session.json()['id']}", api_key=stack.api_key,
        json_body={"query": query},
    )  # fmt: skip


def _last_user_text(request: dict[str, Any]) -> str:
    return str([m for m in request["messages"] if m["role"] == "user"][-1]["content"])


def _answer_events(events: list[SseEvent]) -> list[dict[str, Any]]:
    return [e.data["data"] for e in events if e.event == "final_answer"]


def _streamed(events: list[SseEvent]) -> str:
    """The answer as the client saw it stream."""
    return "".join(a["delta"] for a in _answer_events(events))


def _complete(events: list[SseEvent]) -> dict[str, Any]:
    assert [e.event for e in events].count("complete") == 1 and events[-1].event == "complete"
    data: dict[str, Any] = events[-1].data["data"]
    return data


async def test_max_iterations_end_with_one_synthesis_without_tools_and_thinking(
    api: httpx.AsyncClient, stack: LocalStack, llm: httpx.AsyncClient
) -> None:  # SPEC E-21
    await llm.post("/_script", json={"steps": [
        {"match": "LOOPY", "tool_calls": [THINK]},
        {"match": "LOOPY", "tool_calls": [THINK]},
        {"match": "maximum number of reasoning steps", "content": "Summary at the limit."},
    ]})  # fmt: skip
    agent = await _agent(api, allowed_tools=["thinking"], max_iterations=2, reasoning_effort="high")
    complete = _complete(await _turn(api, stack, agent, "LOOPY question"))
    assert complete["status"] == "completed"
    assert complete["final_answer"] == "Summary at the limit."

    *rounds, closing = await chat_requests(llm)
    assert len(rounds) == 2
    assert all(r["reasoning_effort"] == "high" and "tool_choice" not in r for r in rounds)
    assert closing["tool_choice"] == "none"
    assert closing["reasoning_effort"] == "none", "thinking stays on in the synthesis"
    assert "maximum number of reasoning steps" in _last_user_text(closing)


async def test_the_synthesis_of_an_unknown_model_adds_no_reasoning_effort(
    api: httpx.AsyncClient, stack: LocalStack, llm: httpx.AsyncClient
) -> None:  # SPEC E-21, A-05: a model absent from the capability table
    await llm.post("/_script", json={"steps": [
        {"match": "UNKNOWNMODEL", "tool_calls": [THINK]},
        {"match": "maximum number of reasoning steps", "content": "Summary, plainly."},
    ]})  # fmt: skip
    agent = await _agent(api, allowed_tools=["thinking"], max_iterations=1, model="acme-chat-7")
    complete = _complete(await _turn(api, stack, agent, "UNKNOWNMODEL question"))
    assert complete["final_answer"] == "Summary, plainly."
    requests = await chat_requests(llm)
    assert [r["model"] for r in requests] == ["acme-chat-7"] * 2
    assert requests[-1]["tool_choice"] == "none"
    assert not any("reasoning_effort" in r for r in requests), "the turn sent no effort"


async def test_transient_errors_are_retried_twice_then_the_answer_streams(
    api: httpx.AsyncClient, stack: LocalStack, llm: httpx.AsyncClient
) -> None:  # SPEC E-07
    await llm.post("/_script", json={"steps": [
        {"match": "RETRYME", **OVERLOADED},
        {"match": "RETRYME", "error": {"status": 429, "message": "slow down"}},
        {"match": "RETRYME", "content": "Third time lucky."},
    ]})  # fmt: skip
    events = await _turn(api, stack, await _agent(api), "RETRYME please")
    complete = _complete(events)
    assert complete["status"] == "completed" and complete["final_answer"] == "Third time lucky."
    assert len(await chat_requests(llm)) == 3
    assert "error" not in [e.event for e in events]


async def test_a_model_failing_three_times_ends_the_turn_with_llm_error(
    api: httpx.AsyncClient, stack: LocalStack, llm: httpx.AsyncClient
) -> None:  # SPEC E-07, E-20 unrecoverable LLM failure
    await llm.post("/_script", json={"steps": [{"match": "FAILHARD", **OVERLOADED}] * 4})
    events = await _turn(api, stack, await _agent(api), "FAILHARD please")
    assert len(await chat_requests(llm)) == 3, "two retries, not more"
    [error] = [e.data["data"] for e in events if e.event == "error"]
    assert error == {"code": "llm_error", "retryable": True, "message": MODEL_UNAVAILABLE}
    assert "overloaded" not in str(error), "the provider's own text stays in logs and spans"
    assert _complete(events)["status"] == "failed"


async def test_a_model_failing_after_a_tool_round_answers_from_what_was_gathered(
    api: httpx.AsyncClient, stack: LocalStack, llm: httpx.AsyncClient
) -> None:  # SPEC E-07 with tool results: rescue synthesis
    await llm.post("/_script", json={"steps": [
        {"match": "FAILLATE", "tool_calls": [THINK]},
        *[{"match": "FAILLATE", **OVERLOADED}] * 3,
        {"match": "model failed repeatedly", "content": "Rescued from the thinking."},
    ]})  # fmt: skip
    agent = await _agent(api, allowed_tools=["thinking"], reasoning_effort="high")
    events = await _turn(api, stack, agent, "FAILLATE please")
    complete = _complete(events)
    assert complete["status"] == "completed"
    assert complete["final_answer"] == "Rescued from the thinking."
    assert [e.event for e in events].count("tool_result") == 1
    closing = (await chat_requests(llm))[-1]
    assert closing["tool_choice"] == "none" and closing["reasoning_effort"] == "none"


async def test_an_empty_answer_is_nudged_twice_without_using_a_round_then_falls_back(
    api: httpx.AsyncClient, stack: LocalStack, llm: httpx.AsyncClient
) -> None:  # SPEC E-20 empty answer
    await llm.post("/_script", json={"steps": [
        {"match": "EMPTYANS", "content": ""},
        {"match": NUDGE, "content": ""},
        {"match": NUDGE, "content": ""},
    ]})  # fmt: skip
    # One round only: had a nudge used a round, the next call would be the closing
    # synthesis, which no step above answers.
    events = await _turn(api, stack, await _agent(api, max_iterations=1), "EMPTYANS please")
    complete = _complete(events)
    assert complete["status"] == "completed" and complete["final_answer"] == EMPTY_FALLBACK
    requests = await chat_requests(llm)
    asked = [_last_user_text(r) for r in requests]  # sanitising merges adjacent user turns
    assert all("EMPTYANS please" in text for text in asked)
    assert [text.count(NUDGE) for text in asked] == [0, 1, 2]
    # No answer event during the retries: the answer events carry the fallback once.
    assert _streamed(events) == EMPTY_FALLBACK


async def test_the_agents_llm_call_timeout_ends_a_silent_stream_and_it_is_retried(
    api: httpx.AsyncClient, stack: LocalStack, llm: httpx.AsyncClient
) -> None:  # SPEC E-06 (the agent's llm_call_timeout overrides the 120 s default), E-07
    await llm.post("/_script", json={"steps": [
        {"match": "STALLS", "content": "never shown", "stall_after_chunks": 1},  # role only
        {"match": "STALLS", "content": "Answered on the retry."},
    ]})  # fmt: skip
    agent = await _agent(api, llm_call_timeout_s=1)
    # Under the 120 s default the turn would still be waiting when this gives up.
    events = await asyncio.wait_for(_turn(api, stack, agent, "STALLS please"), 45)
    complete = _complete(events)
    assert complete["status"] == "completed"
    assert complete["final_answer"] == "Answered on the retry."
    assert len(await chat_requests(llm)) == 2
    assert _streamed(events) == "Answered on the retry."


async def test_a_stream_that_stalls_after_showing_text_fails_instead_of_repeating_it(
    api: httpx.AsyncClient, stack: LocalStack, llm: httpx.AsyncClient
) -> None:  # SPEC E-06, E-07: a retry would stream the answer a second time
    await llm.post("/_script", json={"steps": [
        {"match": "HALFWAY", "content": "a first try that stops midway", "stall_after_chunks": 3},
        {"match": "HALFWAY", "content": "never asked for"},
    ]})  # fmt: skip
    agent = await _agent(api, llm_call_timeout_s=1)
    events = await asyncio.wait_for(_turn(api, stack, agent, "HALFWAY please"), 45)
    assert _complete(events)["status"] == "failed"
    [error] = [e.data["data"] for e in events if e.event == "error"]
    assert error["code"] == "llm_error" and "1s" in error["message"], error
    assert len(await chat_requests(llm)) == 1
    streamed = _streamed(events)
    assert streamed and "never asked for" not in streamed


async def test_an_answer_cut_by_the_output_limit_is_delivered_marked_truncated(
    api: httpx.AsyncClient, stack: LocalStack, llm: httpx.AsyncClient
) -> None:  # SPEC E-12 with a body
    await llm.post("/_script", json={"steps": [
        {"match": "CUTOFF", "content": "The refund window is thirty da", "finish_reason": "length"},
    ]})  # fmt: skip
    events = await _turn(api, stack, await _agent(api), "CUTOFF please")
    complete = _complete(events)
    assert complete["status"] == "completed" and complete["truncated"] is True
    assert complete["final_answer"] == "The refund window is thirty da"
    assert not complete["is_fallback"]
    assert _streamed(events) == complete["final_answer"]
    last = _answer_events(events)[-1]
    assert last["done"] and last["truncated"], last
    assert len(await chat_requests(llm)) == 1, "a truncated body is not retried"


async def test_a_cut_without_a_body_is_retried_with_the_length_nudge(
    api: httpx.AsyncClient, stack: LocalStack, llm: httpx.AsyncClient
) -> None:  # SPEC E-12 without a body
    await llm.post("/_script", json={"steps": [
        {"match": "CUTEMPTY", "content": "", "finish_reason": "length"},
        {"match": "CUTEMPTY", "content": "Briefly: thirty days."},
    ]})  # fmt: skip
    events = await _turn(api, stack, await _agent(api, max_iterations=1), "CUTEMPTY please")
    complete = _complete(events)
    assert complete["status"] == "completed" and not complete["truncated"]
    assert complete["final_answer"] == "Briefly: thirty days."
    first, retry = await chat_requests(llm)
    assert LENGTH_NUDGE not in _last_user_text(first)
    assert LENGTH_NUDGE in _last_user_text(retry)  # one round only: the retry used none


async def test_three_cuts_in_a_row_stop_with_the_advice(
    api: httpx.AsyncClient, stack: LocalStack, llm: httpx.AsyncClient
) -> None:  # SPEC E-12: 3 consecutive length rounds
    await llm.post("/_script", json={
        "steps": [{"match": "CUTTHRICE", "content": "", "finish_reason": "length"}] * 3,
    })  # fmt: skip
    events = await _turn(api, stack, await _agent(api), "CUTTHRICE please")
    complete = _complete(events)
    assert complete["status"] == "completed"
    assert complete["final_answer"] == LENGTH_EXHAUSTED and complete["is_fallback"]
    assert len(await chat_requests(llm)) == 3


async def test_a_filtered_answer_is_replaced_by_the_apology_or_kept(
    api: httpx.AsyncClient, stack: LocalStack, llm: httpx.AsyncClient
) -> None:  # SPEC E-09
    await llm.post("/_script", json={"steps": [
        {"match": "FILTERALL", "content": "", "finish_reason": "content_filter"},
        {"match": "FILTERSOME", "content": "What I may say", "finish_reason": "content_filter"},
    ]})  # fmt: skip
    agent = await _agent(api)
    empty = _complete(await _turn(api, stack, agent, "FILTERALL please"))
    assert empty["final_answer"] == CONTENT_FILTER_APOLOGY and empty["is_fallback"]
    kept = _complete(await _turn(api, stack, agent, "FILTERSOME please"))
    assert kept["final_answer"] == "What I may say" and not kept["is_fallback"]
    assert len(await chat_requests(llm)) == 2, "a filtered answer is final, never retried"
