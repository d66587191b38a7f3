"""Encoding a reply as `chat.completion.chunk` objects and server-sent events."""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from typing import Any

from weft_scripted_llm.reply import Reply, ToolCallReply
from weft_scripted_llm.tokens import split_chars

DONE_EVENT = b"data: [DONE]\n\n"


@dataclass(frozen=True)
class CompletionIdentity:
    """The id, creation time and model shared by every chunk of one completion."""

    id: str
    created: int
    model: str


def new_identity(model: str) -> CompletionIdentity:
    return CompletionIdentity(
        id=f"chatcmpl-scripted-{uuid.uuid4().hex[:20]}", created=int(time.time()), model=model
    )


def sse_event(payload: dict[str, Any]) -> bytes:
    """One `data: {...}` server-sent event.

    A script may carry a lone surrogate (to test what a client does with a model that emits
    one): UTF-8 cannot encode it, so such a payload goes out with JSON's ``\\ud800`` escapes.
    """
    text = json.dumps(payload, ensure_ascii=False)
    try:
        return f"data: {text}\n\n".encode()
    except UnicodeEncodeError:
        return f"data: {json.dumps(payload)}\n\n".encode()


def chunk(
    identity: CompletionIdentity,
    delta: dict[str, Any],
    *,
    finish_reason: str | None = None,
    include_usage: bool = False,
) -> dict[str, Any]:
    """A chunk with one choice carrying `delta`."""
    body: dict[str, Any] = {
        "id": identity.id,
        "object": "chat.completion.chunk",
        "created": identity.created,
        "model": identity.model,
        "system_fingerprint": None,
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}],
    }
    if include_usage:
        body["usage"] = None
    return body


def usage_chunk(identity: CompletionIdentity, usage: dict[str, int]) -> dict[str, Any]:
    """The final chunk sent for `stream_options.include_usage`: usage and no choices."""
    body = chunk(identity, {})
    body["choices"] = []
    body["usage"] = usage
    return body


def tool_call_deltas(index: int, call: ToolCallReply, piece_chars: int) -> list[dict[str, Any]]:
    """As OpenAI streams a tool call: id, type and name first, then the arguments in pieces."""
    head = {
        "index": index,
        "id": call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": ""},
    }
    pieces = [p for p in split_chars(call.arguments, piece_chars) if p]
    tail = [{"index": index, "function": {"arguments": p}} for p in pieces]
    return [{"tool_calls": [d]} for d in [head, *tail]]


def reply_deltas(reply: Reply, piece_chars: int) -> list[dict[str, Any]]:
    """Every delta of the reply, in order: role, reasoning, content, tool calls."""
    deltas: list[dict[str, Any]] = [{"role": "assistant", "content": "", "refusal": None}]
    deltas += [{"reasoning_content": piece} for piece in reply.reasoning]
    deltas += [{"content": piece} for piece in reply.content]
    for index, call in enumerate(reply.tool_calls):
        deltas += tool_call_deltas(index, call, piece_chars)
    return deltas


def reply_chunks(
    identity: CompletionIdentity,
    reply: Reply,
    usage: dict[str, int],
    *,
    include_usage: bool,
    piece_chars: int,
) -> list[dict[str, Any]]:
    """All chunks of a streamed reply, finish chunk and optional usage chunk included."""
    chunks = [
        chunk(identity, d, include_usage=include_usage) for d in reply_deltas(reply, piece_chars)
    ]
    chunks.append(
        chunk(identity, {}, finish_reason=reply.final_finish_reason, include_usage=include_usage)
    )
    if include_usage:
        chunks.append(usage_chunk(identity, usage))
    return chunks


def stream_events(chunks: list[dict[str, Any]]) -> list[bytes]:
    """The SSE events of the stream, ending with `data: [DONE]`."""
    return [*(sse_event(c) for c in chunks), DONE_EVENT]
