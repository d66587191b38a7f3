"""Deliverables on the session's stream: the engine turns the files a sandbox result
reports under ``data.deliverables`` into ``deliverable`` events after the result (only
the engine writes a turn's events); a malformed entry is left out, never a failed turn.
Attachment names: what ``weft_contracts.files`` accepts."""

from __future__ import annotations

import time

import pytest
from weft_contracts import AgentConfig, DeliverableEvent, ToolCallCompletedData, ToolResultEvent
from weft_contracts.files import attachment_name_problem, download_path
from weft_engine.reporting import MAX_DELIVERABLES, _result_events
from weft_engine.state import TurnState


def _state() -> TurnState:
    agent = AgentConfig(agent_id="a", model="m", allowed_tools=["shell_exec"])
    return TurnState(
        tenant_id="t", session_id="sess-1", request_id="r", user_id="u", agent=agent,
        messages=[], started_at=time.time(),
    )  # fmt: skip


def _result(data: dict[str, object]) -> ToolCallCompletedData:
    return ToolCallCompletedData(
        call_id="c1", tool_name="shell_exec", success=True, output="exit_code: 0", data=data
    )


def test_each_reported_deliverable_follows_the_tool_result_as_an_event() -> None:
    reported = [{"path": "output/report.md", "size": 12}, {"path": "output/a b.csv", "size": 0}]
    events = _result_events(_state(), _result({"checkpoint": 3, "deliverables": reported}))
    assert [kind for kind, _ in events] == [ToolResultEvent, DeliverableEvent, DeliverableEvent]
    first = events[1][1]
    assert (first.call_id, first.tool_name, first.path, first.size) == (
        "c1", "shell_exec", "output/report.md", 12
    )  # fmt: skip
    assert first.download_path == "/api/v1/sessions/sess-1/files/output/report.md"
    assert events[2][1].download_path == "/api/v1/sessions/sess-1/files/output/a%20b.csv"


@pytest.mark.parametrize(
    "reported",
    [None, "output/x", [1, "x", {"size": 3}, {"path": 7}, {"path": "output/y", "size": -1}]],
)
def test_a_malformed_report_announces_nothing(reported: object) -> None:
    events = _result_events(_state(), _result({"deliverables": reported}))
    assert [kind for kind, _ in events] == [ToolResultEvent]


def test_a_flood_of_deliverables_is_capped() -> None:
    reported = [{"path": f"output/{i}.txt", "size": 1} for i in range(MAX_DELIVERABLES * 3)]
    events = _result_events(_state(), _result({"deliverables": reported}))
    assert len(events) == 1 + MAX_DELIVERABLES


def test_the_download_path_quotes_the_session_and_the_path() -> None:
    assert download_path("a/b", "output/r?.md") == "/api/v1/sessions/a%2Fb/files/output/r%3F.md"


@pytest.mark.parametrize(
    "name", ["", "  ", ".", "..", "a/b", "..\\x", "a\x00b", "a\nb", "a\x7fb", " lead.csv",
             "x" * 256],
)  # fmt: skip
def test_unsafe_attachment_names_are_refused_with_a_reason(name: str) -> None:
    assert attachment_name_problem(name)


@pytest.mark.parametrize("name", ["data.csv", "Rapport été 2026.xlsx", ".env.txt", "a..b.md"])
def test_plain_attachment_names_pass(name: str) -> None:
    assert attachment_name_problem(name) is None
