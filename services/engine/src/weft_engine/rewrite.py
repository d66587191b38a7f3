"""Quick-answer query rewrite (SPEC C-04): a follow-up question made standalone.

In a conversation, "and for the premium plan?" retrieves nothing useful on its own. Before
its one retrieval, a quick-answer turn with history asks the agent's model to rewrite the
question as a standalone search query, reading the previous exchanges only to resolve
references. The rewrite is internal: its text is never streamed to the client; what it
produced shows as the ``query`` argument of the ``search_knowledge`` call. A failed,
empty or runaway rewrite falls back to the question as the user wrote it, and the turn
goes on (STYLE 4).
"""

from __future__ import annotations

from typing import Any

import structlog
from weft_llm import ChatModel, LLMCallError, LLMRequest, LLMResponse

from weft_engine.overflow import current_turn_start, message_text
from weft_engine.state import TurnState
from weft_engine.vision import discard

log = structlog.get_logger(__name__)

REWRITE_PROMPT = (
    "You rewrite the user's latest question into one standalone search query for a "
    "knowledge base. Use the conversation only to resolve what the question refers to "
    "(pronouns, omitted subjects, 'the second one'). Keep the question's language and "
    "meaning; add nothing it does not ask. If it is already standalone, return it "
    "unchanged. Answer with the query alone, on one line, without quotes or comments."
)
REWRITE_MAX_TOKENS = 256
MESSAGE_EXCERPT_CHARS = 1_000
"""How much of each earlier message the rewrite reads: enough to resolve references."""
QUERY_MAX_CHARS = 1_000
"""A longer "query" is the model answering instead of rewriting: the original is kept."""


def conversation_excerpt(state: TurnState, turns: int) -> list[tuple[str, str]]:
    """(role, text) of the user and assistant messages of the last ``turns`` turns before
    this one; tool traffic and empty assistant messages (tool calls) left out."""
    earlier = state.messages[: current_turn_start(state)]
    starts = [i for i, m in enumerate(earlier) if m.get("role") == "user"]
    if not starts or turns <= 0:
        return []
    excerpt = []
    for message in earlier[starts[-min(turns, len(starts))] :]:
        role = message.get("role")
        text = message_text(message)
        if role in ("user", "assistant") and text:
            excerpt.append((str(role), text[:MESSAGE_EXCERPT_CHARS]))
    return excerpt


def rewrite_request(state: TurnState, question: str) -> LLMRequest | None:
    """The rewrite call for this turn; None when there is no conversation to read."""
    excerpt = conversation_excerpt(state, max(state.agent.history_turns, 1))
    if not excerpt:
        return None
    lines = "\n".join(f"{role}: {text}" for role, text in excerpt)
    prompt = f"<conversation>\n{lines}\n</conversation>\n<question>{question}</question>"
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": REWRITE_PROMPT},
        {"role": "user", "content": prompt},
    ]
    return LLMRequest(
        model=state.agent.model,
        messages=messages,
        temperature=0.0,
        max_completion_tokens=REWRITE_MAX_TOKENS,
        stall_timeout_s=state.agent.llm_call_timeout_s,
    )


def standalone_query(response: LLMResponse, question: str) -> str:
    """The model's rewrite cleaned up, or ``question`` when it gave none worth using."""
    lines = [line.strip() for line in response.content.strip().splitlines() if line.strip()]
    query = lines[0].strip("\"'` ") if lines else ""
    if not query or len(query) > QUERY_MAX_CHARS or response.finish_reason == "length":
        return question
    return query


async def rewrite_query(
    model: ChatModel, state: TurnState, question: str
) -> tuple[str, LLMResponse | None]:
    """This turn's search query, and the rewrite's response (None: no call was made)."""
    request = rewrite_request(state, question)
    if request is None:
        return question, None
    try:
        response = await model.stream(request, discard)
    except LLMCallError as exc:  # final but reported: the question as written still works
        log.warning("query_rewrite_failed", request_id=state.request_id, error=str(exc))
        return question, None
    query = standalone_query(response, question)
    log.info("query_rewritten", request_id=state.request_id, changed=query != question)
    return query, response
