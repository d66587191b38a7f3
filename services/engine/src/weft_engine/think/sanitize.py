"""Message sanitising before every LLM call (SPEC E-05)."""

from __future__ import annotations

from typing import Any


def sanitize_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Drop tool results whose call is not in the assistant message just before them, and
    merge consecutive plain messages of the same role (providers reject both)."""
    cleaned: list[dict[str, Any]] = []
    open_calls: set[str] = set()
    for message in messages:
        role = message.get("role")
        if role == "tool":
            if message.get("tool_call_id") not in open_calls:
                continue
        elif role == "assistant" and message.get("tool_calls"):
            open_calls = {c["id"] for c in message["tool_calls"]}
        else:
            open_calls = set()
        if _mergeable(cleaned, message):
            previous = cleaned[-1]
            cleaned[-1] = {**previous, "content": f"{previous['content']}\n\n{message['content']}"}
            continue
        cleaned.append(message)
    return cleaned


def _mergeable(cleaned: list[dict[str, Any]], message: dict[str, Any]) -> bool:
    if not cleaned:
        return False
    previous = cleaned[-1]
    plain = {"role", "content"}
    return (
        previous.get("role") == message.get("role")
        and message.get("role") in ("user", "assistant", "system")
        and set(previous) <= plain
        and set(message) <= plain
        and isinstance(previous.get("content"), str)
        and isinstance(message.get("content"), str)
    )
