"""Quick-answer's FAQ priority, intent detection and query expansion (SPEC C-04), and the
FAQ-first ranking of knowledge's search: the rules, without infrastructure. The turns
themselves are in tests/e2e/test_faq_quick_answer.py."""

from __future__ import annotations

import json

from weft_agent_config.definition import AgentDefinition
from weft_agent_config.resolver import runtime_config
from weft_contracts import AgentConfig, ToolCallCompletedData
from weft_contracts.agent import FaqSettings
from weft_engine.observe import faq_matches
from weft_engine.query_analysis import NEUTRAL, parse_analysis
from weft_engine.quick_answer import direct_answer, retrieval_calls
from weft_engine.state import FaqMatch, TurnState
from weft_knowledge.search import merge_faq
from weft_llm import FinishReason, LLMResponse
from weft_tools.ranking import Candidate


def _agent(**faq: object) -> AgentConfig:
    return AgentConfig(
        agent_id="a", model="m", mode="quick-answer", allowed_tools=["search_knowledge"],
        faq=FaqSettings.model_validate(faq),
    )  # fmt: skip


def _state(agent: AgentConfig, *matches: tuple[float, str]) -> TurnState:
    found = [
        FaqMatch(alias=f"c{i}", question=f"q{i}", answer=answer, match_score=score)
        for i, (score, answer) in enumerate(matches)
    ]
    return TurnState(
        tenant_id="t", session_id="s", request_id="r", user_id="u", agent=agent,
        messages=[], faq_matches=found, round=1, started_at=0.0,
    )  # fmt: skip


def test_the_best_faq_entry_over_the_threshold_answers() -> None:
    agent = _agent(priority_enabled=True, direct_answer_threshold=0.9, score_boost=0.1)
    assert direct_answer(_state(agent, (0.7, "low"), (0.85, "high"), (0.8, "mid"))) == "high"
    # 0.79 + 0.1 stays under 0.9: the turn falls through to its generation
    assert direct_answer(_state(agent, (0.79, "low"))) is None


def test_no_priority_no_direct_answer() -> None:
    agent = _agent(priority_enabled=False, direct_answer_threshold=0.1)
    assert direct_answer(_state(agent, (1.0, "exact"))) is None


def test_the_boost_is_capped_at_one() -> None:
    agent = _agent(priority_enabled=True, direct_answer_threshold=1.0, score_boost=0.5)
    assert direct_answer(_state(agent, (0.6, "boosted"))) == "boosted"


def test_faq_matches_come_from_successful_searches_only() -> None:
    good = {"alias": "c1", "question": "q", "answer": "a", "match_score": 0.9}
    results = [
        ToolCallCompletedData(call_id="1", tool_name="search_knowledge", success=True,
                              data={"faq": [good, {"alias": "c2", "match_score": 7}]}),
        ToolCallCompletedData(call_id="2", tool_name="web_search", success=True,
                              data={"faq": [good]}),
        ToolCallCompletedData(call_id="3", tool_name="search_knowledge", success=False,
                              data={"faq": [good]}),
    ]  # fmt: skip
    assert [m.alias for m in faq_matches(results)] == ["c1"]  # the malformed one dropped


def _response(content: str, finish: FinishReason = "stop") -> LLMResponse:
    return LLMResponse(content=content, reasoning="", tool_calls=[], finish_reason=finish)


def test_the_analysis_keeps_two_distinct_variants() -> None:
    content = 'Sure: {"intent": "knowledge", "variants": ["pwd reset", "Reset?", "a", "b"]}'
    analysis = parse_analysis(_response(content), "reset?")
    assert analysis.intent == "knowledge" and analysis.variants == ["pwd reset", "a"]


def test_an_unusable_analysis_retrieves_without_variants() -> None:
    for content in ("hello", '{"intent": "banter"}', '{"variants": "x"}', "{not json}"):
        assert parse_analysis(_response(content), "q") == NEUTRAL
    assert parse_analysis(_response('{"intent": "chat"}', "length"), "q") == NEUTRAL
    assert parse_analysis(_response('{"intent": "chat"}'), "hi").intent == "chat"


def test_variants_are_searched_beside_the_question() -> None:
    agent = _agent().model_copy(update={"allowed_tools": ["search_knowledge", "web_search"]})
    calls = retrieval_calls(agent, "reset password", ["forgot password"])
    assert [(c.name, json.loads(c.arguments)["query"]) for c in calls] == [
        ("search_knowledge", "reset password"),
        ("search_knowledge", "forgot password"),
        ("web_search", "reset password"),
    ]
    assert len({c.id for c in calls}) == 3


def test_faq_settings_reach_quick_answer_agents_only() -> None:
    fields = {"faq_priority_enabled": True, "faq_direct_answer_threshold": 0.8,
              "faq_score_boost": 0.2, "query_expansion_enabled": True}  # fmt: skip
    quick = AgentDefinition.model_validate({"name": "q", "mode": "quick-answer", **fields})
    faq = runtime_config("q", quick, default_model="m", knowledge_base_ids=[]).faq
    assert faq == FaqSettings(
        priority_enabled=True, direct_answer_threshold=0.8, score_boost=0.2,
        query_expansion=True,
    )  # fmt: skip
    smart = AgentDefinition.model_validate({"name": "s", "mode": "smart-reasoning", **fields})
    assert runtime_config("s", smart, default_model="m", knowledge_base_ids=[]).faq == FaqSettings()


def _candidate(cid: str, score: float, kind: str = "chunk") -> Candidate:
    return Candidate(
        chunk_id=cid, document_id=cid, knowledge_base_id="kb", title=cid,
        content=f"distinct words for {cid}", rerank_score=score, kind=kind,
        match_score=score if kind == "faq" else None,
    )  # fmt: skip


def test_faq_priority_puts_entries_first() -> None:
    chunks = [_candidate("c_high", 0.95), _candidate("c_low", 0.4)]
    faqs = [_candidate("f_mid", 0.5, "faq"), _candidate("f_top", 0.6, "faq")]
    first = [c.chunk_id for c in merge_faq(chunks, faqs, 3, 0.1)]
    assert first == ["f_top", "f_mid", "c_high"]
    pooled = [c.chunk_id for c in merge_faq(chunks, faqs, 3, None)]
    assert pooled[0] == "c_high" and set(pooled) == {"c_high", "f_top", "f_mid"}
