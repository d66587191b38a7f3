"""The engine's turn metrics (issue 37): a turn's end is counted under the EndReason that
ended it, and only while that end is being carried out."""

from __future__ import annotations

import time

from prometheus_client import REGISTRY
from weft_contracts import AgentConfig
from weft_engine.outcomes import IterationLimit
from weft_engine.state import TurnState
from weft_engine.turn_metrics import end_reason_label, ending, turn_ended


def _state() -> TurnState:
    return TurnState(
        tenant_id="t", session_id="s", request_id="r", user_id="u",
        agent=AgentConfig(agent_id="a", model="m"), messages=[], started_at=time.time(),
    )  # fmt: skip


def _ended(reason: str) -> float:
    labels = {"status": "completed", "reason": reason, "tenant": ""}
    return REGISTRY.get_sample_value("weft_turns_ended_total", labels) or 0.0


def test_an_end_counts_under_its_reason_only_while_it_is_carried_out() -> None:
    state = _state()
    assert end_reason_label(IterationLimit(state)) == "iteration_limit"
    before_limit, before_unknown = _ended("iteration_limit"), _ended("unknown")
    with ending(IterationLimit(state)):
        turn_ended(state, "completed")
    turn_ended(state, "completed")  # another path of the same task (the auditor, say)
    assert _ended("iteration_limit") == before_limit + 1
    assert _ended("unknown") == before_unknown + 1, "the reason did not outlive its end"
