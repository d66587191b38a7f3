"""A short, deterministic "summary" of a conversation, for the demo policy."""

from __future__ import annotations

import re

from weft_scripted_llm.openai_schema import ChatCompletionRequest

MAX_POINTS = 5
MAX_POINT_WORDS = 12
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def _first_sentence(text: str) -> str:
    sentences = [s.strip() for s in _SENTENCE_END.split(text) if s.strip()]
    kept = [s for s in sentences if "summar" not in s.lower()]
    if not kept:
        return ""
    point_words = kept[0].split()
    point = " ".join(point_words[:MAX_POINT_WORDS])
    return point if len(point_words) <= MAX_POINT_WORDS else point + "..."


def summarize(request: ChatCompletionRequest) -> str:
    """`Summary: ...` made of the first sentence of each non-system message (at most five)."""
    texts = [m.text() for m in request.messages if m.role not in ("system", "developer")]
    points = [p for p in (_first_sentence(t) for t in texts) if p][:MAX_POINTS]
    if not points:
        return "Summary: there is nothing to summarise yet."
    return "Summary: " + " ".join(p if p[-1] in ".!?" else p + "." for p in points)
