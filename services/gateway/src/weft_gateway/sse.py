"""How stored events become Server-Sent Events (SPEC C-05): the native shape, the
synthetic ending of a silent stream, and the ``?format=weknora`` compatibility projection.

Native: ``id:`` = the Redis Stream position, ``event:`` = the event type, ``data:`` = the
JSON envelope. A stream always ends with ``complete`` or ``error`` + ``complete``.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from sse_starlette import ServerSentEvent
from weft_contracts import (
    CompleteData,
    CompleteEvent,
    ErrorCode,
    ErrorData,
    ErrorEvent,
    TurnStatus,
    assistant_message_id,
)

from weft_gateway.streams import StreamEntry

StreamFormat = Literal["native", "weknora"]

_WEKNORA_TYPES = {
    "turn_started": "agent_query",
    "thought": "thinking",
    "tool_call": "tool_call",
    "tool_result": "tool_result",
    "final_answer": "answer",
    "references": "references",
    "complete": "complete",
    "error": "error",
    "tool_approval_required": "tool_approval_required",
    "tool_approval_resolved": "tool_approval_resolved",
}
"""Our event type -> the reference system's ``response_type``; others are not projected."""

_APPROVAL_CONTENT = {
    "tool_approval_required": "tool requires human approval",
    "tool_approval_resolved": "tool approval resolved",
}
"""The reference's fixed ``content`` of its approval events; their ``data`` gains
``pending_id`` (the prompt id), the name its clients answer with."""


HEARTBEAT_FRAME = b": ping\r\n\r\n"
"""A comment line: keeps proxies from closing an idle stream, ignored by clients."""


def frame(entry: StreamEntry, fmt: StreamFormat = "native") -> bytes | None:
    """The encoded SSE frame of ``entry`` in ``fmt``, built once per entry and format and
    then shared by every client watching the session."""
    try:
        return entry.frames[fmt]
    except KeyError:
        event = to_sse(entry, fmt)
        encoded = entry.frames[fmt] = event.encode() if event is not None else None
        return encoded


def to_sse(entry: StreamEntry, fmt: StreamFormat = "native") -> ServerSentEvent | None:
    """The SSE of one stored entry, or None when the format has no counterpart for it."""
    if fmt == "weknora":
        return weknora_event(entry.entry_id, json.loads(entry.event_json))
    return ServerSentEvent(data=entry.event_json, event=entry.type, id=entry.entry_id)


def synthetic_failure(
    *,
    tenant_id: str,
    session_id: str,
    request_id: str,
    position: str,
    code: ErrorCode,
    message: str,
    fmt: StreamFormat = "native",
) -> list[ServerSentEvent]:
    """``error`` then ``complete`` (status failed) when the gateway must end a stream the
    engine did not end, so a client never waits on silence. Both carry ``position`` (the
    last real event seen), so a resume with it still gets whatever comes later."""
    ids = {"tenant_id": tenant_id, "session_id": session_id, "request_id": request_id}
    error = ErrorEvent(**ids, data=ErrorData(code=code.value, message=message, retryable=True))
    complete = CompleteEvent(**ids, data=CompleteData(status=TurnStatus.FAILED))
    events = []
    for envelope in (error, complete):
        if fmt == "weknora":
            events.append(weknora_event(position, json.loads(envelope.model_dump_json())))
        else:
            data = envelope.model_dump_json()
            events.append(ServerSentEvent(data=data, event=envelope.type, id=position))
    return [e for e in events if e is not None]


def weknora_event(position: str | None, envelope: dict[str, Any]) -> ServerSentEvent | None:
    """One ``message`` event in the reference system's shape: ``id`` = request id,
    ``response_type``, ``content``, ``done``, and the original payload under ``data``.
    ``position`` None: an event with no stream position (a pending prompt shown again)."""
    response_type = _WEKNORA_TYPES.get(envelope["type"])
    if response_type is None:
        return None
    data: dict[str, Any] = envelope.get("data", {})
    if envelope["type"] == "turn_started":
        data = _agent_query_data(envelope)
    if envelope["type"] in _APPROVAL_CONTENT:
        data = {**data, "pending_id": data.get("prompt_id")}
    body: dict[str, Any] = {
        "id": envelope["request_id"],
        "session_id": envelope["session_id"],
        "response_type": response_type,
        "content": _weknora_content(envelope["type"], data),
        "done": _weknora_done(envelope["type"], data),
        "data": data,
    }
    if envelope["type"] == "references":
        body["knowledge_references"] = data.get("references", [])
    if envelope["type"] == "turn_started":
        body["assistant_message_id"] = data["assistant_message_id"]
    return ServerSentEvent(data=json.dumps(body), event="message", id=position)


def _agent_query_data(envelope: dict[str, Any]) -> dict[str, Any]:
    """The reference's ``agent_query`` (the query was received, the turn starts): the
    session and the assistant message the turn is writing, nothing more; the native
    ``turn_started`` keeps the rest."""
    return {
        "session_id": envelope["session_id"],
        "assistant_message_id": assistant_message_id(envelope["id"]),
    }


def _weknora_content(event_type: str, data: dict[str, Any]) -> str:
    if event_type in _APPROVAL_CONTENT:
        return _APPROVAL_CONTENT[event_type]
    if event_type in ("thought", "final_answer"):
        return str(data.get("delta", ""))
    if event_type == "tool_result":
        return str(data.get("output") or data.get("error") or "")
    if event_type == "error":
        return str(data.get("message", ""))
    if event_type == "tool_call":
        return str(data.get("tool_name", ""))
    return ""


def _weknora_done(event_type: str, data: dict[str, Any]) -> bool:
    if event_type in ("turn_started", "complete", "error", *_APPROVAL_CONTENT):
        return True
    if data.get("superseded"):  # an intermediate round's end: the answer is not done yet
        return False
    return bool(data.get("done", event_type in ("tool_call", "tool_result", "references")))
