"""Analyze: decide what an LLM response means for the turn (SPEC E-09..E-14, E-20).

A pure function of the response and the turn's counters, so every stop path of the
reference's table is a unit test.
"""

from __future__ import annotations

from weft_llm import LLMResponse

from weft_engine.outcomes import Answer, Dispatch, Intermediate, Retry, StepOutcome
from weft_engine.state import TurnCounters

LENGTH_REASONS = frozenset({"length", "max_tokens", "max_output_tokens"})
NUDGE = "Please provide your complete answer now as plain text."
LENGTH_NUDGE = (
    "Your previous response was cut off by the output limit. Answer more briefly, or call "
    "tools with shorter arguments."
)
EMPTY_FALLBACK = "Sorry, I could not produce an answer. Please try rephrasing your question."
LENGTH_EXHAUSTED = (
    "The answer was cut off by the output limit several times in a row. Please ask a "
    "smaller question or raise max_completion_tokens."
)
CONTENT_FILTER_APOLOGY = "Sorry, I can't help with that request."
MAX_EMPTY_RETRIES = 2
MAX_LENGTH_ROUNDS = 3
MAX_REPEATED_ROUNDS = 2


def analyze(
    response: LLMResponse, c: TurnCounters, *, steered: bool
) -> tuple[StepOutcome, TurnCounters]:
    """The outcome of ``response`` and the updated counters.

    An answer's text is the content exactly as its deltas streamed, whitespace and all,
    so that the stream, ``complete`` and the stored message agree byte for byte; only
    the emptiness and repetition checks read it stripped (SPEC E-11, E-14)."""
    streamed = response.content
    content = streamed.strip()
    if response.finish_reason in LENGTH_REASONS:
        return _length(response, streamed, c)
    c = c.model_copy(update={"length_rounds": 0})
    if response.tool_calls:
        return Dispatch(response.tool_calls), c.model_copy(
            update={"last_content": None, "repeats": 0}
        )
    if response.finish_reason == "content_filter":  # SPEC E-09
        if not content:
            return Answer(CONTENT_FILTER_APOLOGY, is_fallback=True), c
        return Answer(streamed), c
    if not content:  # SPEC E-11
        if c.empty_retries >= MAX_EMPTY_RETRIES:
            return Answer(EMPTY_FALLBACK, is_fallback=True), c
        return Retry(NUDGE), c.model_copy(update={"empty_retries": c.empty_retries + 1})
    repeats = c.repeats + 1 if content == c.last_content else 1
    c = c.model_copy(update={"last_content": content, "repeats": repeats})
    if repeats >= MAX_REPEATED_ROUNDS:  # SPEC E-14: stuck, stop with the repeated content
        return Answer(streamed), c
    if steered:  # SPEC E-13
        return Intermediate(content), c
    return Answer(streamed), c  # SPEC E-10


def _length(
    response: LLMResponse, streamed: str, c: TurnCounters
) -> tuple[StepOutcome, TurnCounters]:
    """SPEC E-12: deliver a truncated body; retry without one; stop after 3 in a row."""
    rounds = c.length_rounds + 1
    c = c.model_copy(update={"length_rounds": rounds})
    body = bool(streamed.strip())
    if body and not response.tool_calls:
        return Answer(streamed, truncated=True), c
    if rounds >= MAX_LENGTH_ROUNDS:
        # A body was streamed as it came: only the fixed text is sent as a fallback.
        if body:
            return Answer(streamed, truncated=True), c
        return Answer(LENGTH_EXHAUSTED, is_fallback=True), c
    return Retry(LENGTH_NUDGE), c
