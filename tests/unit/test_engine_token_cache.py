"""CachedTokenEstimator: the same counts as the estimator, without re-tokenising
a text counted before, within a bounded memory."""

from __future__ import annotations

from typing import Any

from weft_context import TokenEstimator
from weft_engine.token_cache import MIN_CACHED_CHARS, CachedTokenEstimator

HISTORY: list[dict[str, Any]] = [
    {"role": "system", "content": "You are a helpful assistant. " * 20},
    {"role": "user", "content": "What does the refund policy say about opened boxes? " * 3},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "search_knowledge", "arguments": '{"query": "refund"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "Refunds within 30 days. " * 40},
]


def test_counts_match_the_uncached_estimator_and_the_scale_still_applies() -> None:
    """SPEC M-01 counts and the M-02 scale are unchanged by the cache."""
    plain, cached = TokenEstimator(), CachedTokenEstimator()
    assert cached.messages_tokens(HISTORY) == plain.messages_tokens(HISTORY)
    assert cached.messages_tokens(HISTORY) == plain.messages_tokens(HISTORY)  # from the cache
    plain.set_scale(1.4)
    cached.set_scale(1.4)
    assert cached.messages_tokens(HISTORY) == plain.messages_tokens(HISTORY)


def test_a_text_counted_before_is_not_tokenised_again() -> None:
    calls: list[str] = []
    cached = CachedTokenEstimator()
    original = TokenEstimator.raw_text_tokens

    def counting(self: TokenEstimator, text: str) -> int:
        if len(text) >= MIN_CACHED_CHARS:
            calls.append(text)
        return original(self, text)

    TokenEstimator.raw_text_tokens = counting  # type: ignore[method-assign]
    try:
        cached.messages_tokens(HISTORY)
        first = len(calls)
        cached.messages_tokens([*HISTORY, {"role": "user", "content": "and now? " * 10}])
    finally:
        TokenEstimator.raw_text_tokens = original  # type: ignore[method-assign]
    assert len(calls) == first + 1, "only the new long message was tokenised"


def test_memory_stays_within_its_character_budget() -> None:
    cached = CachedTokenEstimator(max_chars=1000)
    texts = [f"{i} " + "word " * 60 for i in range(20)]
    for text in texts:
        cached.text_tokens(text)
    assert cached.cached_texts * len(texts[0]) <= 1000
    assert cached.cached_texts >= 1
    assert cached.text_tokens("x" * (MIN_CACHED_CHARS - 1)) >= 1  # short texts: not cached
