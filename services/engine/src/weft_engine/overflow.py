"""Provider context overflow (SPEC E-25): detect it, shed history, retry once."""

from __future__ import annotations

from weft_llm import ChatMessage, ContextOverflowError, LLMCallError

from weft_engine.state import TurnState
from weft_engine.vision import content_text


def is_context_overflow(exc: LLMCallError) -> bool:
    """The provider refused the request as too long for the model (SPEC E-25): the model
    client recognised it from the provider's answer; a completion budget truncation is
    not an overflow (that is a finish reason, not an error)."""
    return isinstance(exc, ContextOverflowError)


def shed_history(state: TurnState) -> TurnState:
    """Forced compaction stand-in: drop the oldest half of the history turns (whole turns,
    so tool calls never lose their results), keep the system prompt and this turn."""
    messages = state.messages
    starts = [i for i, m in enumerate(messages) if m["role"] == "user"]
    if len(starts) < 2:
        return state
    current = current_turn_start(state)
    history_starts = [i for i in starts if i < current]
    if not history_starts:
        return state
    cut = history_starts[len(history_starts) // 2] if len(history_starts) > 1 else current
    kept = [m for m in messages[: starts[0]] if m["role"] == "system"]
    return state.model_copy(update={"messages": [*kept, *messages[cut:]]})


def current_turn_start(state: TurnState) -> int:
    """Index of this turn's user message: the last user message carrying runtime context."""
    for i in range(len(state.messages) - 1, -1, -1):
        message = state.messages[i]
        if message["role"] == "user" and "<runtime_context>" in str(message["content"]):
            return i
    return len(state.messages) - 1


def message_text(message: ChatMessage) -> str:
    """A message's text (image parts left out) without the runtime context the engine
    appends to this turn's user message (SPEC E-24)."""
    return content_text(message["content"]).split("<runtime_context>")[0].strip()


def current_query(state: TurnState) -> str:
    """The user's question of this turn, without its runtime context."""
    return message_text(state.messages[current_turn_start(state)])
