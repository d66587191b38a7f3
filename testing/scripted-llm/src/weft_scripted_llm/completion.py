"""Encoding a reply as a non-streaming `chat.completion` object."""

from __future__ import annotations

from typing import Any

from weft_scripted_llm.reply import Reply
from weft_scripted_llm.streaming import CompletionIdentity


def message_body(reply: Reply) -> dict[str, Any]:
    """The assistant message; `reasoning_content` only when there is reasoning."""
    message: dict[str, Any] = {"role": "assistant", "content": reply.content_text, "refusal": None}
    if reply.reasoning:
        message["reasoning_content"] = reply.reasoning_text
    if reply.tool_calls:
        message["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            }
            for call in reply.tool_calls
        ]
    return message


def completion_body(
    identity: CompletionIdentity, reply: Reply, usage: dict[str, int]
) -> dict[str, Any]:
    """The whole `chat.completion` response body."""
    return {
        "id": identity.id,
        "object": "chat.completion",
        "created": identity.created,
        "model": identity.model,
        "system_fingerprint": None,
        "choices": [
            {
                "index": 0,
                "message": message_body(reply),
                "logprobs": None,
                "finish_reason": reply.final_finish_reason,
            }
        ],
        "usage": usage,
    }
