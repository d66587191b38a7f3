"""Quick-answer mode (SPEC A-01, C-04): intent -> rewrite -> one retrieval round -> a
direct FAQ answer or one generation without tools; no ReAct loop.

Intent and expansion (``query_analysis.py``, when the agent's FAQ settings ask): a message
that needs no knowledge skips retrieval; other phrasings of the question are searched
beside it, in the same round.

FAQ priority: the knowledge search puts FAQ entries first (their match plus the agent's
boost); once the round is observed, the best FAQ entry whose boosted match reaches the
agent's direct-answer threshold is the answer, as stored, without a generation.

Rewrite: in a conversation, "and for the premium plan?" retrieves nothing useful on its
own. Before its one retrieval, a quick-answer turn with history asks the agent's model to
rewrite the question as a standalone search query, reading the previous exchanges only to
resolve references. The rewrite is internal: its text is never streamed to the client;
what it produced shows as the ``query`` argument of the ``search_knowledge`` call. A
failed, empty or runaway rewrite falls back to the question as the user wrote it, and the
turn goes on (STYLE 4).

Retrieval: the calls the engine makes itself, no model. The knowledge base is searched
with the (rewritten) question when the agent has ``search_knowledge``, and the web with it
when the agent has ``web_search`` (its web switch on and the request allowing it), for
``web_search_max_results`` results (5 by default; at most what the tool takes). Both are
read-only: they run in parallel.

Generation: once the retrieval round is observed, the turn ends with ``QuickAnswered``:
the loop's closing synthesis, at the agent's own effort (it is the answer, not a rescue).
"""

from __future__ import annotations

import json

import structlog
from weft_contracts import AgentConfig
from weft_llm import ChatMessage, ChatModel, LLMCallError, LLMRequest, LLMResponse, ToolCallRequest
from weft_tool_catalog.specs import WEB_SEARCH_MAX_COUNT

from weft_engine.act import ToolRound
from weft_engine.metering import TurnMeter
from weft_engine.outcomes import (
    Answer,
    Answered,
    AwaitTools,
    Continue,
    Dispatch,
    Ended,
    QuickAnswered,
)
from weft_engine.overflow import current_query, current_turn_start, message_text
from weft_engine.query_analysis import NEUTRAL, QueryAnalysis, analyse_query
from weft_engine.state import TurnState
from weft_engine.tracing import TurnTracer
from weft_engine.vision import discard

log = structlog.get_logger(__name__)

RETRIEVAL_TOOLS = ("search_knowledge", "web_search")


def retrieval_tools(agent: AgentConfig) -> list[str]:
    """The agent's retrieval tools, in call order (none: quick-answer only generates)."""
    return [tool for tool in RETRIEVAL_TOOLS if tool in agent.allowed_tools]


def retrieval_calls(
    agent: AgentConfig, query: str, variants: list[str] | None = None
) -> list[ToolCallRequest]:
    """The pipeline's calls for ``query``, in a fixed order (none without a retrieval
    tool); the knowledge base is searched with each of ``variants`` too (expansion)."""
    web = {"query": query, "count": min(agent.web_search_max_results, WEB_SEARCH_MAX_COUNT)}
    arguments: list[tuple[str, dict[str, object]]] = []
    for name in retrieval_tools(agent):
        if name == "search_knowledge":
            arguments += [(name, {"query": q}) for q in [query, *(variants or [])]]
        else:
            arguments.append((name, web))
    return [
        ToolCallRequest(id=f"call_qa_{n}", name=name, arguments=json.dumps(args))
        for n, (name, args) in enumerate(arguments)
    ]


def direct_answer(state: TurnState) -> str | None:
    """The answer of the best FAQ entry found whose match plus the agent's boost reaches
    its direct-answer threshold; None: no FAQ priority, or no entry good enough."""
    faq = state.agent.faq
    if not faq.priority_enabled:
        return None
    best: tuple[float, str] | None = None
    for match in state.faq_matches:
        score = min(1.0, match.match_score + faq.score_boost)
        if score >= faq.direct_answer_threshold and (best is None or score > best[0]):
            best = (score, match.answer)
    return best[1] if best else None


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
    starts = [i for i, m in enumerate(earlier) if m["role"] == "user"]
    if not starts or turns <= 0:
        return []
    excerpt = []
    for message in earlier[starts[-min(turns, len(starts))] :]:
        role = message["role"]
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
    messages: list[ChatMessage] = [
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


class QuickAnswer:
    """A quick-answer turn's step; built once per replica."""

    def __init__(self, *, model: ChatModel, tools: ToolRound, tracer: TurnTracer, meter: TurnMeter):
        self._model = model
        self._meter = meter
        self._tools = tools
        self._tracer = tracer

    async def step(self, state: TurnState) -> Continue | AwaitTools | Ended:
        """The retrieval round on the turn's first step (when the agent retrieves and the
        message needs it), then a direct FAQ answer or the end that generates one."""
        if state.round > 0:
            faq_answer = direct_answer(state)
            if faq_answer is not None:
                log.info("faq_direct_answer", request_id=state.request_id)
                return Ended(Answered(state, Answer(text=faq_answer), ""))
            return Ended(QuickAnswered(state))
        if not retrieval_tools(state.agent):
            return Ended(QuickAnswered(state))
        query = current_query(state)
        state, analysis = await self._analyse(state, query)
        if analysis.intent == "chat" and state.agent.faq.intent_detection:
            return Ended(QuickAnswered(state))  # SPEC C-04: nothing to retrieve
        if state.agent.query_rewrite:
            query, rewrite = await rewrite_query(self._model, state, query)
            if rewrite is not None:
                state = await self._meter.add(state, rewrite.usage)
            state = self._tracer.add_usage(state, rewrite.usage if rewrite else None)
        variants = analysis.variants if state.agent.faq.query_expansion else []
        calls = retrieval_calls(state.agent, query, variants)
        state = self._tracer.begin_round(state)
        response = LLMResponse(
            content="", reasoning="", tool_calls=calls, finish_reason="tool_calls"
        )
        return await self._tools.start(state, response, Dispatch(calls))

    async def _analyse(self, state: TurnState, query: str) -> tuple[TurnState, QueryAnalysis]:
        """Intent and expansion when the agent asks for either (one metered call)."""
        faq = state.agent.faq
        if not (faq.intent_detection or faq.query_expansion):
            return state, NEUTRAL
        analysis, response = await analyse_query(self._model, state, query)
        if response is not None:
            state = await self._meter.add(state, response.usage)
        return self._tracer.add_usage(state, response.usage if response else None), analysis
