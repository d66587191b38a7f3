"""Engine phases without infrastructure: act (E-15, E-16, E-17), observe (E-19)."""

from __future__ import annotations

import time

import pytest
from weft_contracts import AgentConfig, ToolCallCompletedData
from weft_engine.act import (
    dispatch_groups,
    dispatch_messages,
    parse_arguments,
    plan_calls,
)
from weft_engine.observe import ERROR_HINT, observe
from weft_engine.state import TurnState
from weft_llm import ToolCallRequest

from tests.unit.turn_states import text, tool_calls


def _state() -> TurnState:
    return TurnState(
        tenant_id="t",
        session_id="s",
        request_id="r",
        user_id="u",
        agent=AgentConfig(
            agent_id="a", model="m", knowledge_base_ids=["kb1"], allowed_tools=["search_knowledge"]
        ),
        messages=[{"role": "user", "content": "q"}],
        started_at=time.time(),
    )


def _call(
    call_id: str, name: str = "search_knowledge", args: str = '{"query": "a"}'
) -> ToolCallRequest:
    return ToolCallRequest(id=call_id, name=name, arguments=args)


def test_broken_json_arguments_are_repaired() -> None:  # SPEC E-16
    assert parse_arguments('{"query": "refund policy"') == {"query": "refund policy"}
    assert parse_arguments("") == {}


def test_non_object_arguments_are_refused() -> None:  # SPEC E-16
    with pytest.raises(ValueError, match="JSON object"):
        parse_arguments("[1, 2]")


def test_plan_normalises_ids_and_reports_bad_arguments_with_the_hint() -> None:  # SPEC E-16
    pending, errors = plan_calls(_state(), [_call(""), _call("x1", args="[1]")], 60)
    assert [p.call_id for p in pending] == ["call_0_0", "x1"]
    assert list(errors) == ["x1"] and errors["x1"].endswith(ERROR_HINT)


def test_per_tool_timeouts() -> None:  # SPEC E-17
    calls = [_call("a"), _call("b", name="shell_exec"), _call("c", name="web_fetch")]
    pending, _ = plan_calls(_state(), calls, 60)
    assert [p.timeout_s for p in pending] == [60, 605, 185]


def test_only_read_only_calls_overlap_others_are_barriers() -> None:  # SPEC E-15
    calls = [_call("r1"), _call("r2"), _call("w1", name="shell_exec"), _call("r3"), _call("r4")]
    pending, _ = plan_calls(_state(), calls, 60)
    assert dispatch_groups(pending) == [["r1", "r2"], ["w1"], ["r3", "r4"]]


def test_dispatch_sets_absolute_deadlines_and_skips_failed_calls() -> None:
    state = _state()
    pending, _ = plan_calls(state, [_call("ok"), _call("bad", args="[1]")], 60)
    results = {
        "bad": ToolCallCompletedData(call_id="bad", tool_name="search_knowledge", success=False)
    }
    state = state.model_copy(update={"pending": pending, "results": results})
    before = time.time()
    updated, messages = dispatch_messages(state, ["ok", "bad"])
    assert [m.data.call_id for m in messages] == ["ok"]
    assert messages[0].key() == b"ok"  # spread over workers by call id
    assert messages[0].data.context.knowledge_base_ids == ["kb1"]
    assert updated[0].deadline >= before + 60


def test_observe_appends_protocol_messages_in_original_order() -> None:  # SPEC E-19
    state = _state()
    pending, _ = plan_calls(state, [_call("c-a"), _call("c-b")], 60)
    results = {  # the second result arrived first
        "c-b": ToolCallCompletedData(
            call_id="c-b", tool_name="search_knowledge", success=False, error="boom"
        ),
        "c-a": ToolCallCompletedData(
            call_id="c-a", tool_name="search_knowledge", success=True, output="A"
        ),
    }
    state = state.model_copy(
        update={
            "pending": pending,
            "results": results,
            "preamble": "let me look",
            "phase": "waiting",
        }
    )
    after = observe(state)
    assert after.round == 1 and not after.pending and after.phase == "think"
    assistant, tool_a, tool_b = after.messages[-3:]
    assert [c["id"] for c in tool_calls(assistant)] == ["c-a", "c-b"]
    assert assistant["content"] == "let me look"
    assert tool_a == {"role": "tool", "tool_call_id": "c-a", "content": "A"}
    assert text(tool_b).startswith("Error: boom") and ERROR_HINT in text(tool_b)
    assert [c.success for c in after.steps[0].tool_calls] == [True, False]


def test_dispatch_carries_the_api_keys_knowledge_restriction() -> None:  # SPEC A-09, T-11
    state = _state()
    agent = state.agent.model_copy(
        update={"knowledge_base_ids": [], "key_knowledge_base_ids": ["kb2"]}
    )
    state = state.model_copy(update={"agent": agent})
    pending, _ = plan_calls(state, [_call("q", "database_query", '{"sql": "SELECT 1"}')], 60)
    _, messages = dispatch_messages(state.model_copy(update={"pending": pending}), ["q"])
    assert messages[0].data.context.key_knowledge_base_ids == ["kb2"]
    assert messages[0].data.context.knowledge_base_ids == []


def test_a_call_id_the_turn_used_already_is_renamed_everywhere_the_model_reads_it() -> None:
    """Providers that count call_0, call_1... in every response: the second round's
    call_0 is not the first's (a worker would take it for a redelivery of a write call),
    nor is an id repeated within one response, nor a model's id equal to the fallback."""
    state = _state()
    first, _ = plan_calls(state, [_call("call_0"), _call("")], 60)
    assert [p.call_id for p in first] == ["call_0", "call_0_1"]
    results = {
        p.call_id: ToolCallCompletedData(call_id=p.call_id, tool_name=p.tool_name, success=True)
        for p in first
    }
    state = observe(state.model_copy(update={"pending": first, "results": results}))
    calls = [_call("call_0"), _call("call_0"), _call("call_0_1"), _call("fresh")]
    second, _ = plan_calls(state, calls, 60)
    ids = [p.call_id for p in second]
    assert len(set(ids)) == len(ids) and not set(ids) & {"call_0", "call_0_1"}, ids
    assert ids[3] == "fresh"  # an id not met before is the model's own
    results = {
        p.call_id: ToolCallCompletedData(call_id=p.call_id, tool_name=p.tool_name, success=True)
        for p in second
    }
    after = observe(state.model_copy(update={"pending": second, "results": results}))
    assistant = after.messages[-5]
    assert [c["id"] for c in tool_calls(assistant)] == ids
    assert [m["tool_call_id"] for m in after.messages[-4:]] == ids  # type: ignore[typeddict-item]
