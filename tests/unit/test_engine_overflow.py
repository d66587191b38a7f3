"""Context-overflow detection and history shedding (SPEC E-25)."""

from __future__ import annotations

from weft_contracts import AgentConfig
from weft_engine.overflow import current_query, is_context_overflow, shed_history
from weft_engine.state import TurnState
from weft_llm import (
    ContextOverflowError,
    LLMCallError,
    TransientLLMError,
)

from tests.unit.turn_states import text, with_history


def _state(history_turns: int) -> TurnState:
    return with_history(AgentConfig(agent_id="a", model="m"), history_turns, "now?")


def test_only_the_overflow_type_is_an_overflow() -> None:
    # SPEC E-25: the model client classifies the provider's answer once (test_llm_errors)
    assert is_context_overflow(ContextOverflowError("maximum context length", status=400))
    assert not is_context_overflow(LLMCallError("bad request", status=400))
    assert not is_context_overflow(TransientLLMError("context_length_exceeded", status=500))


def test_shedding_keeps_system_current_turn_and_whole_recent_turns() -> None:
    state = _state(4)
    shed = shed_history(state)
    roles = [m["role"] for m in shed.messages]
    assert roles[0] == "system" and text(shed.messages[-1]).startswith("now?")
    assert [m["content"] for m in shed.messages if m["role"] == "user"][:2] == ["q2", "q3"]
    for i, message in enumerate(shed.messages):  # no orphan tool results
        if message["role"] == "tool":
            assert shed.messages[i - 1]["role"] in ("assistant", "tool")
    assert current_query(shed) == "now?"


def test_nothing_to_shed_without_history() -> None:
    state = _state(0)
    assert shed_history(state).messages == state.messages
