"""How a compaction summary travels in the conversation (SPEC M-04).

The summary is a user message between the system prompt and the kept tail, marked so the
compactor can recognise (and merge) a previous summary. memory uses the same format for
the leading summary it rebuilds from a checkpoint (SPEC M-08).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from weft_llm import UserMessage

SUMMARY_OPEN = "<conversation_summary>"
SUMMARY_CLOSE = "</conversation_summary>"
SUMMARY_PREAMBLE = (
    "The earlier part of this conversation was compacted. Summary of what happened so far:"
)


def summary_message(summary: str) -> UserMessage:
    """The marked user message that carries ``summary``."""
    return {
        "role": "user",
        "content": f"{SUMMARY_PREAMBLE}\n{SUMMARY_OPEN}\n{summary}\n{SUMMARY_CLOSE}",
    }


def summary_text(message: Mapping[str, Any]) -> str | None:
    """The summary inside a marked message, or ``None`` for any other message."""
    content = message.get("content")
    if message.get("role") != "user" or not isinstance(content, str):
        return None
    start, end = content.find(SUMMARY_OPEN), content.rfind(SUMMARY_CLOSE)
    if not content.startswith(SUMMARY_PREAMBLE) or start < 0 or end < start:
        return None
    return content[start + len(SUMMARY_OPEN) : end].strip("\n")
