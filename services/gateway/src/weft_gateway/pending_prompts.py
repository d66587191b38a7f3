"""Pending prompts shown again on a stream that lost them (SPEC H-02, H-03).

A prompt can wait longer than a session's Redis Stream is kept, and Redis can lose the
stream altogether; the prompt itself is kept by memory. So when a client opens or resumes
a session's stream, the gateway asks memory for the session's pending prompts and, for
each whose ``tool_approval_required`` is no longer in the stream, sends that event first,
built from memory's view, **without an SSE id**: a client's ``Last-Event-ID`` stays the
position of the last real entry it read, so resuming never skips or repeats an entry.

Only the stream's newest entries are searched (:data:`SCAN_PAGES` pages): a prompt whose
event is further back than that is sent again, which a client recognises by its
``prompt_id``. Memory unreachable: the stream opens without them (logged), rather than
failing because of a side view.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import structlog
from fastapi import HTTPException
from redis.asyncio import Redis
from sse_starlette import ServerSentEvent

from weft_gateway.approvals_client import ApprovalsClient, PromptView
from weft_gateway.auth import Principal
from weft_gateway.sse import StreamFormat, weknora_event
from weft_gateway.streams import stream_key

log = structlog.get_logger(__name__)

REQUIRED = "tool_approval_required"
SCAN_PAGE = 200
SCAN_PAGES = 10
_DATA_FIELDS = (
    "prompt_id", "kind", "round", "call_id", "tool_name", "risk", "always_ask", "arguments",
    "arguments_digest", "reason", "agent_id", "user_id", "expires_at", "timeout_s",
    "on_timeout", "approver_group", "escalation_timeout_s", "authorization_url",
)  # fmt: skip


async def pending_prompts(
    memory: ApprovalsClient, who: Principal, session_id: str, timeout_s: float
) -> list[PromptView]:
    """The session's pending prompts; none when memory does not answer in time."""
    try:
        answer = await memory.list_prompts(who, session_id, "pending", timeout_s=timeout_s)
    except HTTPException as exc:
        log.warning("pending_prompts_unavailable", status=exc.status_code, detail=exc.detail)
        return []
    prompts = answer.get("prompts") if isinstance(answer, dict) else None
    return [p for p in prompts or [] if isinstance(p, dict) and p.get("prompt_id")]


async def missing_from_stream(
    redis: Redis, tenant_id: str, session_id: str, prompts: Sequence[PromptView]
) -> list[PromptView]:
    """Those of ``prompts`` whose ``tool_approval_required`` the stream's newest entries
    do not hold."""
    wanted = {str(p["prompt_id"]) for p in prompts}
    key, upper = stream_key(tenant_id, session_id), "+"
    for _ in range(SCAN_PAGES):
        if not wanted:
            break
        entries: Any = await redis.xrevrange(key, max=upper, count=SCAN_PAGE)
        for _entry_id, fields in entries:
            if fields.get(b"type") == REQUIRED.encode():
                data = json.loads(fields[b"event"]).get("data", {})
                wanted.discard(str(data.get("prompt_id")))
        if len(entries) < SCAN_PAGE:
            break
        upper = f"({entries[-1][0].decode()}"
    return [p for p in prompts if str(p["prompt_id"]) in wanted]


def prompt_frames(tenant_id: str, prompts: Sequence[PromptView], fmt: StreamFormat) -> bytes:
    """The ``tool_approval_required`` events of ``prompts``, without ids, oldest first."""
    frames = []
    for prompt in prompts:
        envelope = prompt_event(tenant_id, prompt)
        if fmt == "weknora":
            event = weknora_event(None, envelope)
        else:
            event = ServerSentEvent(data=json.dumps(envelope), event=REQUIRED)
        if event is not None:
            frames.append(event.encode())
    return b"".join(frames)


def prompt_event(tenant_id: str, prompt: PromptView) -> dict[str, Any]:
    """The envelope of a prompt's ``tool_approval_required`` as memory's view rebuilds it
    (the event's own id; never a credential)."""
    data = {name: prompt[name] for name in _DATA_FIELDS if name in prompt}
    data.setdefault("round", 0)
    return {
        "id": prompt.get("event_id") or prompt["prompt_id"],
        "type": REQUIRED,
        "tenant_id": tenant_id,
        "session_id": prompt["session_id"],
        "request_id": prompt["request_id"],
        "seq": prompt.get("event_seq", 0),
        "data": data,
    }
