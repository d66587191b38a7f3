"""Message sanitising before every LLM call (SPEC E-05)."""

from __future__ import annotations

from weft_llm import ChatMessage


def sanitize_messages(messages: list[ChatMessage]) -> list[ChatMessage]:
    """Drop tool results whose call is not in the assistant message just before them, and
    merge consecutive plain messages of the same role (providers reject both)."""
    cleaned: list[ChatMessage] = []
    open_calls: set[str] = set()
    for message in messages:
        if message["role"] == "tool":
            if message["tool_call_id"] not in open_calls:
                continue
        elif message["role"] == "assistant" and message.get("tool_calls"):
            open_calls = {c["id"] for c in message.get("tool_calls", [])}
        else:
            open_calls = set()
        merged = _merged(cleaned[-1], message) if cleaned else None
        if merged is not None:
            cleaned[-1] = merged
            continue
        cleaned.append(message)
    return cleaned


def _merged(previous: ChatMessage, message: ChatMessage) -> ChatMessage | None:
    """``previous`` and ``message`` as one message when both are plain text of the same
    role (user, assistant or system), else ``None``."""
    plain = {"role", "content"}
    if not set(previous) <= plain or not set(message) <= plain:
        return None
    before, after = previous["content"], message["content"]
    if not isinstance(before, str) or not isinstance(after, str):
        return None
    content = f"{before}\n\n{after}"
    if previous["role"] == "user" and message["role"] == "user":
        return {"role": "user", "content": content}
    if previous["role"] == "assistant" and message["role"] == "assistant":
        return {"role": "assistant", "content": content}
    if previous["role"] == "system" and message["role"] == "system":
        return {"role": "system", "content": content}
    return None
