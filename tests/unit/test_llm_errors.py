"""The model client's typed failures and finish reasons (SPEC E-06, E-07, E-09, E-25)."""

from __future__ import annotations

import pytest
from weft_llm import (
    FINISH_REASONS,
    ContextOverflowError,
    LLMCallError,
    ModelStalledError,
    TransientLLMError,
    finish_reason,
)
from weft_llm.openai_model import _Accumulator, status_error


@pytest.mark.parametrize("status", [408, 409, 429, 500, 502, 503, 504, 529])
def test_retryable_statuses_are_transient(status: int) -> None:
    # SPEC E-07: the engine retries exactly this type
    error = status_error(status, "overloaded")
    assert type(error) is TransientLLMError and error.status == status
    assert str(error) == f"model returned HTTP {status}: overloaded"


@pytest.mark.parametrize(
    ("message", "code"),
    [
        ("This model's maximum context length is 8192 tokens", None),
        ("Request too large", "context_length_exceeded"),
        ("prompt is longer than the model's context window", None),
    ],
)
def test_a_400_naming_the_context_is_an_overflow(message: str, code: str | None) -> None:
    # SPEC E-25: recognised once, from the provider's code or words
    error = status_error(400, message, code)
    assert type(error) is ContextOverflowError and error.status == 400


def test_other_client_errors_are_final_and_not_overflows() -> None:
    for error in (
        status_error(400, "bad request"),
        status_error(401, "maximum context length"),  # only a 400 is an overflow
    ):
        assert type(error) is LLMCallError
    # a 5xx naming the context is the provider's trouble: retried, not shed (SPEC E-07)
    assert type(status_error(500, "context_length_exceeded")) is TransientLLMError


def test_a_stall_is_transient_and_keeps_its_timeout() -> None:
    # SPEC E-06: the engine reports the stall with its own seconds
    error = ModelStalledError("no output from the model for 120s", stalled_s=120)
    assert isinstance(error, TransientLLMError) and error.stalled_s == 120


def test_known_finish_reasons_are_kept() -> None:
    for reason in FINISH_REASONS:
        assert finish_reason(reason, has_tool_calls=False) == reason
    assert {"length", "max_tokens", "max_output_tokens", "content_filter"} <= FINISH_REASONS


@pytest.mark.parametrize("raw", [None, "", "error", "recitation", "STOP"])
def test_a_missing_or_unknown_finish_reason_follows_the_response_shape(raw: str | None) -> None:
    # the engine judges such a response by its content and calls, not by a word it
    # cannot interpret (an unknown reason is never taken for a truncation, SPEC E-09)
    assert finish_reason(raw, has_tool_calls=False) == "stop"
    assert finish_reason(raw, has_tool_calls=True) == "tool_calls"


def test_the_accumulator_maps_a_provider_specific_reason() -> None:
    acc = _Accumulator(finish_reason="recitation")
    acc.add_tool_delta({"index": 0, "id": "c1", "function": {"name": "t", "arguments": "{}"}})
    assert acc.result().finish_reason == "tool_calls"
    assert _Accumulator(finish_reason="end_turn").result().finish_reason == "end_turn"
