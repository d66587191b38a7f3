"""Tool-result truncation when a request is still over budget after summarising (SPEC M-06)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from weft_context.tokens import TokenEstimator

HEAD_SHARE = 0.7


def truncate_text(text: str, max_tokens: int, estimator: TokenEstimator) -> str | None:
    """``text`` cut to about ``max_tokens`` (70 % head, 30 % tail), or ``None`` if it fits."""
    tokens = estimator.text_tokens(text)
    if tokens <= max_tokens:
        return None
    keep_chars = max(1, int(len(text) * max_tokens / tokens))
    head = int(keep_chars * HEAD_SHARE)
    tail = keep_chars - head
    omitted = len(text) - keep_chars
    return (
        f"{text[:head]}\n[... {omitted} characters truncated to fit the context window ...]\n"
        f"{text[len(text) - tail :]}"
    )


def truncate_tool_results(
    messages: Sequence[dict[str, Any]], max_tokens: int, estimator: TokenEstimator
) -> tuple[list[dict[str, Any]], int]:
    """Every tool result longer than ``max_tokens`` truncated; the count of those cut."""
    out: list[dict[str, Any]] = []
    count = 0
    for message in messages:
        content = message.get("content")
        if message.get("role") == "tool" and isinstance(content, str):
            cut = truncate_text(content, max_tokens, estimator)
            if cut is not None:
                message = {**message, "content": cut}
                count += 1
        out.append(message)
    return out, count
