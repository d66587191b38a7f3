"""Quick-answer's intent detection and query expansion (SPEC C-04): one short model call
before the retrieval round, when the agent asks for either.

The model answers a small JSON object: whether the message needs the knowledge bases at
all (``"chat"``: a greeting, thanks, small talk: no retrieval, the generation answers
alone) and up to two other phrasings of the question that a search may match better
(each searched beside the question). The analysis is internal: never streamed. Anything
unusable (a failed call, no JSON, wrong shapes, runaway text) is the neutral analysis:
retrieve, no expansion (STYLE 4: final but reported, the turn goes on).
"""

from __future__ import annotations

import json
import re
from typing import Literal

import structlog
from pydantic import BaseModel, Field, ValidationError
from weft_llm import ChatMessage, ChatModel, LLMCallError, LLMRequest, LLMResponse

from weft_engine.state import TurnState
from weft_engine.vision import discard

log = structlog.get_logger(__name__)

MAX_VARIANTS = 2
VARIANT_MAX_CHARS = 500
ANALYSIS_MAX_TOKENS = 300
ANALYSIS_PROMPT = (
    "You prepare a user's message for a search of the knowledge bases. Answer with one "
    'JSON object and nothing else: {"intent": "knowledge" or "chat", "variants": [...]}. '
    'intent is "chat" only when the message needs no information at all (a greeting, '
    'thanks, small talk); otherwise "knowledge". variants holds at most two other '
    "phrasings of the question (synonyms, the expanded form of an abbreviation), in its "
    "language; [] when there is nothing useful to add."
)
_OBJECT = re.compile(r"\{.*\}", re.DOTALL)


class QueryAnalysis(BaseModel):
    """What the analysis decided (the neutral one: retrieve, no variants)."""

    intent: Literal["knowledge", "chat"] = "knowledge"
    variants: list[str] = Field(default_factory=list)


NEUTRAL = QueryAnalysis()


def analysis_request(state: TurnState, question: str) -> LLMRequest:
    """The analysis call for ``question``."""
    messages: list[ChatMessage] = [
        {"role": "system", "content": ANALYSIS_PROMPT},
        {"role": "user", "content": question},
    ]
    return LLMRequest(
        model=state.agent.model,
        messages=messages,
        temperature=0.0,
        max_completion_tokens=ANALYSIS_MAX_TOKENS,
        stall_timeout_s=state.agent.llm_call_timeout_s,
    )


def parse_analysis(response: LLMResponse, question: str) -> QueryAnalysis:
    """The model's analysis, cleaned up: distinct variants other than the question, at
    most two, each short; :data:`NEUTRAL` when the answer is unusable."""
    found = _OBJECT.search(response.content)
    if found is None or response.finish_reason == "length":
        return NEUTRAL
    try:
        raw = QueryAnalysis.model_validate(json.loads(found.group(0)))
    except (ValueError, ValidationError):
        return NEUTRAL
    seen = {question.strip().lower()}
    variants: list[str] = []
    for variant in raw.variants:
        text = " ".join(variant.split())
        if text and len(text) <= VARIANT_MAX_CHARS and text.lower() not in seen:
            seen.add(text.lower())
            variants.append(text)
    return QueryAnalysis(intent=raw.intent, variants=variants[:MAX_VARIANTS])


async def analyse_query(
    model: ChatModel, state: TurnState, question: str
) -> tuple[QueryAnalysis, LLMResponse | None]:
    """The analysis of ``question`` and the call's response (None: the call failed)."""
    try:
        response = await model.stream(analysis_request(state, question), discard)
    except LLMCallError as exc:  # final but reported: retrieval with the question still works
        log.warning("query_analysis_failed", request_id=state.request_id, error=str(exc))
        return NEUTRAL, None
    analysis = parse_analysis(response, question)
    log.info(
        "query_analysed",
        request_id=state.request_id,
        intent=analysis.intent,
        variants=len(analysis.variants),
    )
    return analysis, response
