"""Chat messages that come from storage are validated once, where they enter the engine:
memory's history answer and a turn state read back from Redis. A malformed message is a
clear error there, naming the message and the field, not a KeyError in a later step."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import pytest
from pydantic import ValidationError
from weft_contracts import AgentConfig
from weft_engine.history_client import HistoryClient, MalformedHistory, MemoryUnavailable
from weft_engine.state import TurnState
from weft_llm import CHAT_MESSAGES, ChatMessage

GOOD: list[ChatMessage] = [
    {"role": "user", "content": [
        {"type": "text", "text": "what is this?"},
        {"type": "image_url", "image_url": {"url": "https://img.example.com/a.png"}},
    ]},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "search", "arguments": "{}"}}
    ]},
    {"role": "tool", "tool_call_id": "c1", "content": "passages"},
    {"role": "assistant", "content": "a cat"},
]  # fmt: skip


def _memory(messages: list[dict[str, Any]]) -> HistoryClient:
    def answer(request: httpx.Request) -> httpx.Response:
        turns = [{"turn_id": "turn-1", "start": 0, "count": len(messages)}]
        return httpx.Response(200, json={"messages": messages, "turns": turns})

    return HistoryClient("http://memory", transport=httpx.MockTransport(answer))


async def test_a_valid_history_enters_unchanged() -> None:
    raw: list[dict[str, Any]] = [dict(m) for m in GOOD]
    history = await _memory(raw).history("t", "s", token_budget=1000)
    assert history.messages == GOOD
    assert history.turn_ids == ["turn-1"] * len(GOOD)


async def test_a_tool_message_without_its_call_id_is_refused_where_it_enters() -> None:
    raw: list[dict[str, Any]] = [dict(m) for m in GOOD]
    raw[2] = {"role": "tool", "content": "passages"}
    with pytest.raises(MalformedHistory, match=r"session s: stored message 2\.tool\.tool_call_id"):
        await _memory(raw).history("t", "s", token_budget=1000)


@pytest.mark.parametrize(
    "bad",
    [
        {"role": "narrator", "content": "once upon a time"},
        {"role": "user"},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "c1"}]},
        {"content": "no role"},
    ],
    ids=["unknown-role", "no-content", "broken-tool-call", "no-role"],
)
async def test_other_malformed_messages_are_refused_too(bad: dict[str, Any]) -> None:
    with pytest.raises(MalformedHistory, match="stored message 1"):
        await _memory([{"role": "user", "content": "hi"}, bad]).history("t", "s", token_budget=1000)


async def test_a_malformed_history_is_memory_unavailable_for_the_turn() -> None:
    """The opening reads it as ``MemoryUnavailable`` and fails the turn with the history
    error (HISTORY_UNAVAILABLE), the detail naming the message; nothing crashes."""
    with pytest.raises(MemoryUnavailable):
        await _memory([{"role": "tool", "content": "x"}]).history("t", "s", token_budget=1000)


def _state(messages: list[ChatMessage]) -> TurnState:
    return TurnState(
        tenant_id="t", session_id="s", request_id="r", user_id="u",
        agent=AgentConfig(agent_id="a", model="m"), messages=messages, started_at=time.time(),
    )  # fmt: skip


def test_a_turn_state_round_trips_its_messages() -> None:
    stored = _state(GOOD).model_dump_json()
    assert TurnState.model_validate_json(stored).messages == GOOD


def test_a_stored_turn_state_with_a_malformed_message_is_refused() -> None:
    stored = json.loads(_state(GOOD).model_dump_json())
    del stored["messages"][2]["tool_call_id"]
    with pytest.raises(ValidationError, match=r"messages\.2\.tool\.tool_call_id"):
        TurnState.model_validate_json(json.dumps(stored))


def test_the_adapter_picks_the_shape_by_role() -> None:
    (message,) = CHAT_MESSAGES.validate_python(
        [{"role": "tool", "tool_call_id": "c", "content": "x"}]
    )
    assert message == {"role": "tool", "tool_call_id": "c", "content": "x"}
    with pytest.raises(ValidationError) as raised:
        CHAT_MESSAGES.validate_python([{"role": "tool", "content": "x"}])
    # discriminated: one error about the tool shape, not four about every role's shape
    assert raised.value.error_count() == 1
