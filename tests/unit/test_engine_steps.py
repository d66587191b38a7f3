"""Engine phases without infrastructure: argument repair (E-16), observe (E-19)."""

from __future__ import annotations

import time

import pytest
from weft_contracts import AgentConfig, ToolCallCompletedData
from weft_engine.act import ERROR_HINT, parse_arguments, plan_calls
from weft_engine.observe import observe
from weft_engine.state import TurnState
from weft_llm import ToolCallRequest


def _state() -> TurnState:
    return TurnState(
        tenant_id="t",
        session_id="s",
        request_id="r",
        user_id="u",
        agent=AgentConfig(agent_id="a", model="m", knowledge_base_ids=["kb1"]),
        messages=[{"role": "user", "content": "q"}],
        started_at=time.time(),
    )


def test_broken_json_arguments_are_repaired() -> None:  # SPEC E-16
    assert parse_arguments('{"query": "refund policy"') == {"query": "refund policy"}
    assert parse_arguments("") == {}


def test_non_object_arguments_are_refused() -> None:  # SPEC E-16
    with pytest.raises(ValueError, match="JSON object"):
        parse_arguments("[1, 2]")


def test_plan_normalises_ids_and_reports_bad_arguments_without_dispatching() -> None:
    calls = [
        ToolCallRequest(id="", name="search_knowledge", arguments='{"query": "a"}'),
        ToolCallRequest(id="x1", name="search_knowledge", arguments="[1]"),
    ]
    pending, messages, errors = plan_calls(_state(), calls, deadline_s=60)
    assert [p.call_id for p in pending] == ["call_0_0", "x1"]
    assert [m.data.call_id for m in messages] == ["call_0_0"]
    assert errors["x1"].endswith(ERROR_HINT)
    assert messages[0].data.context.knowledge_base_ids == ["kb1"]
    assert messages[0].key() == b"call_0_0"  # spread over workers by call id


def test_observe_appends_protocol_messages_in_original_order() -> None:  # SPEC E-19
    state = _state()
    calls = [
        ToolCallRequest(id="c-a", name="search_knowledge", arguments='{"query": "a"}'),
        ToolCallRequest(id="c-b", name="search_knowledge", arguments='{"query": "b"}'),
    ]
    pending, _, _ = plan_calls(state, calls, deadline_s=60)
    results = {  # the second result arrived first
        "c-b": ToolCallCompletedData(
            call_id="c-b", tool_name="search_knowledge", success=False, error="boom"
        ),
        "c-a": ToolCallCompletedData(
            call_id="c-a", tool_name="search_knowledge", success=True, output="A"
        ),
    }
    state = state.model_copy(
        update={"pending": pending, "results": results, "preamble": "let me look"}
    )
    after = observe(state)
    assert after.round == 1 and not after.pending
    assistant, tool_a, tool_b = after.messages[-3:]
    assert [c["id"] for c in assistant["tool_calls"]] == ["c-a", "c-b"]
    assert assistant["content"] == "let me look"
    assert tool_a == {"role": "tool", "tool_call_id": "c-a", "content": "A"}
    assert tool_b["content"].startswith("Error: boom") and ERROR_HINT in tool_b["content"]
    assert [c.success for c in after.steps[0].tool_calls] == [True, False]
