"""Contracts: discriminated unions, validation, and proto/ freshness (ARCHITECTURE)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import TypeAdapter, ValidationError
from weft_contracts import (
    AgentEvent,
    CompleteData,
    CompleteEvent,
    ThoughtData,
    ThoughtEvent,
    Topic,
    TurnStatus,
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
