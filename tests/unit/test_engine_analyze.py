"""Every stop path of the reference's table, as a pure function (SPEC E-09..E-14, E-20)."""

from __future__ import annotations

from weft_engine.analyze import (
    CONTENT_FILTER_APOLOGY,
    EMPTY_FALLBACK,
    LENGTH_EXHAUSTED,
    LENGTH_NUDGE,
    NUDGE,
    analyze,
)
from weft_engine.outcomes import Answer, Dispatch, Intermediate, Retry
from weft_engine.state import TurnCounters
from weft_llm import FinishReason, LLMResponse, ToolCallRequest


def _r(content: str = "", reason: FinishReason = "stop", tools: int = 0) -> LLMResponse:
    calls = [
        ToolCallRequest(id=f"c{i}", name="search_knowledge", arguments="{}") for i in range(tools)
    ]
    return LLMResponse(content=content, reasoning="", tool_calls=calls, finish_reason=reason)


def test_natural_stop_with_content_is_the_answer() -> None:  # SPEC E-10
    for reason in ("stop", "end_turn", "stop_sequence"):
        outcome, _ = analyze(_r("Paris.", reason), TurnCounters(), steered=False)
        assert outcome == Answer("Paris.")


def test_the_answer_is_the_content_as_streamed_whitespace_and_all() -> None:  # SPEC E-10
    """The stream sends every delta as the model wrote it; ``complete`` and the stored
    message carry this text, so they must not trim what the client already shows."""
    for text in (" hi there \n", "\n\nParis.\n", "a\n  "):
        answer, c = analyze(_r(text), TurnCounters(), steered=False)
        assert answer == Answer(text), repr(text)
        truncated, _ = analyze(_r(text, "length"), TurnCounters(), steered=False)
        assert truncated == Answer(text, truncated=True)
        filtered, _ = analyze(_r(text, "content_filter"), TurnCounters(), steered=False)
        assert filtered == Answer(text)
    # a repeat is still recognised when only the surrounding whitespace differs (E-14)
    _, c = analyze(_r("Paris."), TurnCounters(), steered=False)
    stuck, _ = analyze(_r(" Paris.\n"), c, steered=False)
    assert stuck == Answer(" Paris.\n")


def test_empty_answer_is_nudged_twice_then_falls_back() -> None:  # SPEC E-11
    c = TurnCounters()
    first, c = analyze(_r(""), c, steered=False)
    second, c = analyze(_r("  "), c, steered=False)
    third, c = analyze(_r(""), c, steered=False)
    assert first == Retry(NUDGE) and second == Retry(NUDGE)
    assert third == Answer(EMPTY_FALLBACK, is_fallback=True)


def test_truncated_body_is_delivered_marked() -> None:  # SPEC E-12
    outcome, _ = analyze(_r("Half an answ", "length"), TurnCounters(), steered=False)
    assert outcome == Answer("Half an answ", truncated=True)


def test_truncation_without_body_retries_and_three_in_a_row_stop() -> None:  # SPEC E-12
    c = TurnCounters()
    first, c = analyze(_r("", "length"), c, steered=False)
    second, c = analyze(_r("", "max_tokens", tools=1), c, steered=False)
    third, c = analyze(_r("", "max_output_tokens"), c, steered=False)
    assert isinstance(first, Retry) and isinstance(second, Retry)
    assert third == Answer(LENGTH_EXHAUSTED, is_fallback=True)


def test_a_cut_body_with_tool_calls_is_neither_delivered_nor_dispatched() -> None:
    """SPEC E-12: only a body *without* tools is delivered as a truncated answer; cut tool
    calls are never run (their arguments are incomplete, T-16), so the round is retried
    like one without a body; the third cut in a row stops with the last body, which the
    client already saw streamed (not a fallback: it must not be sent a second time), and
    drops the calls."""
    c = TurnCounters()
    first, c = analyze(_r("Let me search for", "length", tools=1), c, steered=False)
    second, c = analyze(_r("Let me search for", "max_tokens", tools=2), c, steered=False)
    assert first == Retry(LENGTH_NUDGE) and second == Retry(LENGTH_NUDGE)
    third, c = analyze(_r("Let me search for", "length", tools=1), c, steered=False)
    assert third == Answer("Let me search for", truncated=True, is_fallback=False)
    assert c.length_rounds == 3


def test_a_normal_round_resets_the_length_count() -> None:
    c = TurnCounters(length_rounds=2)
    _, c = analyze(_r("", tools=1), c, steered=False)
    assert c.length_rounds == 0


def test_content_filter_stops_with_content_or_apology() -> None:  # SPEC E-09
    assert analyze(_r("", "content_filter"), TurnCounters(), steered=False)[0] == Answer(
        CONTENT_FILTER_APOLOGY, is_fallback=True
    )
    assert analyze(_r("partial", "content_filter"), TurnCounters(), steered=False)[0] == Answer(
        "partial"
    )


def test_tool_calls_dispatch() -> None:  # SPEC E-15
    outcome, _ = analyze(_r("let me search", "tool_calls", tools=2), TurnCounters(), steered=False)
    assert isinstance(outcome, Dispatch) and len(outcome.calls) == 2


def test_steer_makes_the_answer_intermediate() -> None:  # SPEC E-13
    outcome, _ = analyze(_r("Draft answer"), TurnCounters(), steered=True)
    assert outcome == Intermediate("Draft answer")


def test_two_identical_rounds_without_tools_stop() -> None:  # SPEC E-14
    c = TurnCounters()
    first, c = analyze(_r("same"), c, steered=True)
    second, c = analyze(_r("same"), c, steered=True)
    assert first == Intermediate("same") and second == Answer("same")
