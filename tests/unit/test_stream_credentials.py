"""Session streams are what clients read: no entry is written or read with the envelope's
credential (docs/security.md "Credentials stay inside")."""

from __future__ import annotations

import json

from weft_contracts import ThoughtData, ThoughtEvent
from weft_gateway.sse import to_sse
from weft_gateway.streams import client_json, stream_entry

TOKEN = "eyJhbGciOiJFZERTQSJ9.eyJ0eXAiOiJyZXF1ZXN0In0.c2lnbmF0dXJlc2lnbmF0dXJl"


def _event(delta: str = 'the model said "credential": x') -> ThoughtEvent:
    return ThoughtEvent(
        tenant_id="t", session_id="s", request_id="r", seq=2, credential=TOKEN,
        data=ThoughtData(round=0, delta=delta),
    )  # fmt: skip


def test_an_event_is_written_without_its_credential() -> None:
    stored = json.loads(client_json(_event()))
    assert "credential" not in stored
    assert stored["data"]["delta"] == 'the model said "credential": x'


def test_an_entry_an_older_gateway_stored_with_a_credential_is_served_without_it() -> None:
    fields = {b"type": b"thought", b"request_id": b"r",
              b"event": _event().model_dump_json().encode()}  # fmt: skip
    entry = stream_entry("5-0", fields)
    assert TOKEN not in entry.event_json and "credential" not in json.loads(entry.event_json)
    for fmt in ("native", "weknora"):
        sse = to_sse(entry, fmt)
        assert sse is not None and TOKEN not in sse.encode().decode(), fmt


def test_an_entry_without_a_credential_is_served_as_stored() -> None:
    raw = client_json(_event())
    entry = stream_entry("5-0", {b"type": b"thought", b"request_id": b"r", b"event": raw.encode()})
    assert entry.event_json == raw
