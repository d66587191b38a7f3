"""Which candidate questions a set keeps, and when a turn gets none (SPEC Q-02, Q-03)."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass

from weft_contracts import SuggestedQuestion

from weft_suggestions.config import FollowUpConfig

_NOT_WORD = re.compile(r"[\W_]+", re.UNICODE)


def normalised(text: str) -> str:
    """``text`` as compared for sameness: NFKC, case-folded, punctuation and spacing
    dropped ("What is RAG?" and "what is  rag" are the same question)."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    return _NOT_WORD.sub(" ", folded).strip()


def keep(
    candidates: Iterable[SuggestedQuestion], *, user_question: str, count: int
) -> list[SuggestedQuestion]:
    """At most ``count`` candidates in order, without the user's own question (SPEC Q-03),
    without repeats and without blank ones."""
    seen = {normalised(user_question)}
    kept: list[SuggestedQuestion] = []
    for question in candidates:
        key = normalised(question.text)
        if not key or key in seen:
            continue
        seen.add(key)
        kept.append(question)
        if len(kept) == count:
            break
    return kept


@dataclass(frozen=True, kw_only=True)
class AnsweredTurn:
    """What suppression looks at in a finished turn."""

    status: str
    answer: str
    is_fallback: bool


def suppression(turn: AnsweredTurn, config: FollowUpConfig) -> str | None:
    """Why the turn gets no follow-ups (SPEC Q-02), or None when it gets them."""
    if turn.status != "completed":
        return "turn_not_completed"
    if not turn.answer.strip():
        return "empty_answer"
    if config.suppress_on_fallback and turn.is_fallback:
        return "fallback_answer"
    if config.suppress_when_answer_asks_question and asks_question(turn.answer):
        return "answer_asks_question"
    return None


def asks_question(answer: str) -> bool:
    """Whether the answer ends by asking the user something: its last sentence ends with a
    question mark (Latin, full-width or Arabic), ignoring closing quotes and markup."""
    tail = answer.rstrip().rstrip("*_`\"')»”")
    return tail.endswith(("?", "\uff1f", "\u061f"))
