"""Tool-result truncation when a request is still over budget after summarising (SPEC M-06)."""

from __future__ import annotations

from collections.abc import Sequence

from weft_context.tokens import TokenEstimator
from weft_llm import ChatMessage

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
    messages: Sequence[ChatMessage], max_tokens: int, estimator: TokenEstimator
) -> tuple[list[ChatMessage], int]:
    """Every tool result longer than ``max_tokens`` truncated; the count of those cut."""
    out: list[ChatMessage] = []
    count = 0
    for message in messages:
        if message["role"] == "tool":
            cut = truncate_text(message["content"], max_tokens, estimator)
            if cut is not None:
                out.append({**message, "content": cut})
                count += 1
                continue
        out.append(message)
    return out, count
