"""Contracts: discriminated unions, validation, and proto/ freshness (ARCHITECTURE)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import TypeAdapter, ValidationError
from weft_contracts import (
    AgentEvent,
    CompleteData,
    CompleteEvent,
    SuggestedQuestion,
    SuggestionsReady,
    SuggestionsReadyData,
    ThoughtData,
    ThoughtEvent,
    ToolCallData,
    ToolCallEvent,
    Topic,
    TurnStatus,
    UnsupportedSchemaVersion,
    read_json,
)
from weft_contracts.generate import render
from weft_contracts.topics import TOPIC_MODELS

REPO = Path(__file__).resolve().parents[2]
IDS = {"tenant_id": "t1", "session_id": "s1", "request_id": "r1"}


def test_agent_event_round_trips_through_the_union() -> None:
    event = CompleteEvent(**IDS, seq=7, data=CompleteData(status=TurnStatus.COMPLETED))
    decoded = TypeAdapter(AgentEvent).validate_json(event.model_dump_json())
    assert isinstance(decoded, CompleteEvent)
    assert decoded == event


def test_unknown_type_is_rejected_with_the_discriminator_named() -> None:
    raw = ThoughtEvent(**IDS, data=ThoughtData(round=0, delta="x")).model_dump()
    raw["type"] = "thougth"
    with pytest.raises(ValidationError, match="thougth"):
        TypeAdapter(AgentEvent).validate_python(raw)


def test_envelope_requires_tenant_and_session() -> None:
    with pytest.raises(ValidationError, match="tenant_id"):
        ThoughtEvent(
            tenant_id="", session_id="s", request_id="r", data=ThoughtData(round=0, delta="")
        )


def test_event_ids_sort_by_creation() -> None:
    first = ThoughtEvent(**IDS, data=ThoughtData(round=0, delta="a"))
    second = ThoughtEvent(**IDS, data=ThoughtData(round=0, delta="b"))
    assert first.id < second.id


def test_every_topic_has_a_model() -> None:
    assert set(TOPIC_MODELS) == set(Topic)


def test_proto_is_up_to_date() -> None:
    """`make proto` output is committed; this fails when a model changed without it."""
    stale = [
        str(path.relative_to(REPO))
        for path, content in render(REPO / "proto").items()
        if not path.exists() or path.read_text() != content
    ]
    assert not stale, f"proto/ is stale, run `make proto`: {stale}"


def _later_version_of_a_tool_call(**envelope: Any) -> dict[str, Any]:
    """A ``tool_call`` event as a later Weft could write it: fields this version lacks."""
    event = ToolCallEvent(
        **IDS, data=ToolCallData(round=1, call_id="c1", tool_name="t", arguments={})
    )
    body = json.loads(event.model_dump_json())
    body["data"]["added_later"] = {"any": "shape"}
    body["partition_hint"] = 3
    return {**body, **envelope}


def test_a_reader_ignores_the_fields_a_later_version_added() -> None:
    """weft_contracts.compat: services of two versions share the topics in a rolling deploy."""
    adapter: TypeAdapter[Any] = TypeAdapter(TOPIC_MODELS[Topic.AGENT_EVENTS])
    body = json.dumps(_later_version_of_a_tool_call())
    event = read_json(adapter, body)
    assert isinstance(event, ToolCallEvent) and event.data.call_id == "c1"
    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        adapter.validate_json(body)  # the models themselves stay strict


def test_a_newer_schema_version_is_refused_whether_or_not_it_fits() -> None:
    adapter: TypeAdapter[Any] = TypeAdapter(TOPIC_MODELS[Topic.AGENT_EVENTS])
    fits = json.dumps(_later_version_of_a_tool_call(schema_version=2))
    with pytest.raises(
        UnsupportedSchemaVersion, match="schema_version 2; this reader knows up to 1"
    ):
        read_json(adapter, fits)
    reshaped = json.dumps({**_later_version_of_a_tool_call(schema_version=2), "data": "moved"})
    with pytest.raises(UnsupportedSchemaVersion):
        read_json(adapter, reshaped)
    with pytest.raises(ValidationError):  # this version's shape, broken: undecodable
        read_json(adapter, json.dumps({**_later_version_of_a_tool_call(), "data": "moved"}))
    with pytest.raises(ValidationError):
        read_json(adapter, b"not json")


def test_writers_stay_strict() -> None:
    """A misspelt field in Weft's own code fails where the message is built."""
    with pytest.raises(ValidationError, match="roud"):
        ToolCallData(roud=1, call_id="c", tool_name="t", arguments={})  # type: ignore[call-arg]


def test_published_schemas_let_readers_meet_added_fields() -> None:
    """proto/ is what other platform services read: no ``additionalProperties: false``."""
    for path, content in render(REPO / "proto").items():
        assert '"additionalProperties": false' not in content, path


def test_suggestions_ready_round_trips_through_the_notices_topic() -> None:  # SPEC Q-04
    notice = SuggestionsReady(
        **IDS,
        data=SuggestionsReadyData(
            assistant_message_id="m1a",
            placement="follow_up",
            locale="en",
            state="ready",
            questions=[
                SuggestedQuestion(
                    id="k0", text="More on pricing?", source="knowledge", document_id="d1"
                )
            ],
        ),
    )
    decoded = read_json(TypeAdapter(TOPIC_MODELS[Topic.SESSION_NOTICES]), notice.model_dump_json())
    assert decoded == notice
    with pytest.raises(ValidationError, match="state"):
        SuggestionsReadyData(
            assistant_message_id="m1a", placement="follow_up", locale="en", state="generating"
        )
