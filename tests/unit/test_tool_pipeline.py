"""Registry pipeline and small tools: casting (SPEC T-02), per-tool caps (T-03), cleanup
(T-04), thinking (T-05), todo_write (T-06), capabilities (A-07), ranking steps (T-07)."""

from __future__ import annotations

import json

import pytest
from weft_contracts import ToolContext
from weft_tool_catalog import ToolInvocation, ToolOutcome, ToolRegistry, ToolSpec
from weft_tool_catalog.capabilities import DOCUMENT_READER, RETRIEVAL, KBCapability
from weft_tool_catalog.casting import cast_arguments
from weft_tool_catalog.catalog import tool_catalog
from weft_tools.knowledge_tools import omitted_marker
from weft_tools.planning_tools import ThinkingTool, TodoWriteTool
from weft_tools.ranking import Candidate, LexicalReranker, dedupe, mmr, rerank, rrf

SCHEMA = {
    "type": "object",
    "properties": {
        "flag": {"type": "boolean"},
        "n": {"type": "integer"},
        "x": {"type": "number"},
        "ids": {"type": "array", "items": {"type": "integer"}},
        "opts": {"type": "object", "properties": {"deep": {"type": "boolean"}}},
        "text": {"type": "string"},
    },
}


def _call(args: dict[str, object], limit: int = 24000, request: str = "r") -> ToolInvocation:
    ctx = ToolContext(user_id="u", agent_id="a", max_output_chars=limit)
    return ToolInvocation(
        tenant_id="t", session_id="s", request_id=request, arguments=args, context=ctx
    )


def test_string_arguments_are_cast_to_their_schema_types() -> None:  # SPEC T-02
    cast = cast_arguments(
        {"flag": "true", "n": "10", "x": "2.5", "ids": "[1, 2]", "opts": {"deep": "no"},
         "text": "true", "extra": "1"},
        SCHEMA,
    )  # fmt: skip
    assert cast == {
        "flag": True, "n": 10, "x": 2.5, "ids": [1, 2], "opts": {"deep": False},
        "text": "true", "extra": "1",
    }  # fmt: skip


def test_uncastable_values_are_left_for_the_validator() -> None:  # SPEC T-02
    assert cast_arguments({"flag": "maybe", "n": "1.5"}, SCHEMA) == {"flag": "maybe", "n": "1.5"}


def test_array_items_are_cast_one_by_one() -> None:  # SPEC T-02
    cast = cast_arguments({"ids": ["1", " 2 ", 3.0, "x"]}, SCHEMA)
    assert cast == {"ids": [1, 2, 3, "x"]}  # "x" is left for the validator to name
    assert cast_arguments({"ids": '["4", 5]'}, SCHEMA) == {"ids": [4, 5]}  # JSON text, then items


def test_surrounding_whitespace_does_not_block_a_cast() -> None:  # SPEC T-02
    cast = cast_arguments({"flag": " TRUE\n", "n": "\t7 ", "x": " 0.5", "ids": " [1]"}, SCHEMA)
    assert cast == {"flag": True, "n": 7, "x": 0.5, "ids": [1]}
    assert cast_arguments({"text": "  kept as is  "}, SCHEMA) == {"text": "  kept as is  "}


def test_nullable_type_lists_cast_to_their_non_null_type() -> None:  # SPEC T-02
    schema = {"type": "object", "properties": {
        "n": {"type": ["integer", "null"]}, "flag": {"type": ["null", "boolean"]},
        "anything": {"type": ["null"]},
    }}  # fmt: skip
    cast = cast_arguments({"n": "5", "flag": "off", "anything": "1"}, schema)
    assert cast == {"n": 5, "flag": False, "anything": "1"}
    assert cast_arguments({"n": None}, schema) == {"n": None}


def test_integral_floats_become_integers_and_other_numbers_stay() -> None:  # SPEC T-02
    cast = cast_arguments({"n": 3.0, "x": 3.0, "flag": 1}, SCHEMA)
    assert cast == {"n": 3, "x": 3.0, "flag": 1}
    assert type(cast["n"]) is int
    assert cast_arguments({"n": "4.0"}, SCHEMA) == {"n": 4}
    assert cast_arguments({"n": 2.5}, SCHEMA) == {"n": 2.5}  # the validator reports it
    assert cast_arguments({"n": 7}, SCHEMA) == {"n": 7}


class Recorder:
    spec = ToolSpec(name="rec", description="d", parameters=SCHEMA, max_output_chars=300)

    def __init__(self) -> None:
        self.seen: dict[str, object] = {}
        self.cleaned: list[tuple[str, str]] = []

    async def run(self, call: ToolInvocation) -> ToolOutcome:
        self.seen = call.arguments
        return ToolOutcome(success=True, output="x" * 1000)

    async def cleanup(self, session_id: str, request_id: str) -> None:
        self.cleaned.append((session_id, request_id))


async def test_registry_casts_then_runs_and_applies_the_tighter_cap() -> None:  # T-02, T-03
    registry, tool = ToolRegistry(), Recorder()
    registry.register(tool)
    outcome = await registry.execute("rec", _call({"flag": "false", "n": "3"}))
    assert tool.seen == {"flag": False, "n": 3}
    assert len(outcome.output) < 400 and "omitted" in outcome.output  # tool cap 300 < 24000


async def test_cleanup_reaches_cleanable_tools() -> None:  # SPEC T-04
    registry, tool = ToolRegistry(), Recorder()
    registry.register(tool)
    await registry.cleanup("s1", "r1")
    assert tool.cleaned == [("s1", "r1")]


async def test_thinking_reports_progress_and_incomplete_steps() -> None:  # SPEC T-05
    tool = ThinkingTool()
    args = {"thought": "first", "next_thought_needed": True, "thought_number": 1,
            "total_thoughts": 3}  # fmt: skip
    await tool.run(_call(args))
    third = {**args, "thought": "third", "thought_number": 3, "branch_id": "alt"}
    progress = json.loads((await tool.run(_call(third))).output)
    assert progress["incomplete_steps"] == [2] and progress["branches"] == ["alt"]
    assert progress["recorded"] == 2
    await tool.cleanup("s", "r")
    fresh = json.loads((await tool.run(_call(args))).output)
    assert fresh["recorded"] == 1


async def test_todo_write_formats_the_plan() -> None:  # SPEC T-06
    steps = [
        {"id": "1", "description": "search refunds", "status": "completed"},
        {"id": "2", "description": "read policy", "status": "in_progress"},
    ]
    outcome = await TodoWriteTool().run(_call({"task": "refunds", "steps": steps}))
    assert outcome.display_type == "plan"
    assert outcome.output.splitlines() == [
        "Plan: refunds", "[x] 1. search refunds", "[~] 2. read policy", "1/2 completed",
    ]  # fmt: skip


def test_capability_requirements() -> None:  # SPEC A-07
    assert RETRIEVAL.satisfied_by({KBCapability.KEYWORD})
    assert not RETRIEVAL.satisfied_by({KBCapability.WIKI})
    assert DOCUMENT_READER.satisfied_by({KBCapability.WIKI}) and DOCUMENT_READER.auxiliary
    catalog = {e.name: e for e in tool_catalog()}
    assert catalog["database_query"].read_only
    assert {"search_knowledge", "read_document", "list_documents", "data_analysis"} <= set(catalog)


def _cand(cid: str, content: str, score: float = 1.0) -> Candidate:
    return Candidate(
        chunk_id=cid, document_id="d", knowledge_base_id="k", title="t", content=content,
        score=score,
    )  # fmt: skip


def test_rrf_rewards_agreement_between_rankings() -> None:  # SPEC T-07
    fused = rrf([["a", "b", "c"], ["c", "a"]])
    assert sorted(fused, key=lambda k: -fused[k]) == ["a", "c", "b"]


async def test_rerank_threshold_then_best_candidate_fallback() -> None:  # SPEC T-07
    query = "annual refund policy plans"
    strong = [_cand("1", "annual refund policy for plans"), _cand("2", "office hours")]
    kept, rejected = await rerank(LexicalReranker(), query, strong)
    assert [c.chunk_id for c in kept] == ["1"] and not rejected
    weak = [_cand("1", "refund desk"), _cand("2", "office hours")]  # 1/4 = 0.25: fallback
    kept, rejected = await rerank(LexicalReranker(), query, weak)
    assert [c.chunk_id for c in kept] == ["1"] and not rejected
    none = [_cand("2", "office hours")]
    assert await rerank(LexicalReranker(), query, none) == ([], True)


async def test_the_reranker_matches_word_forms_as_the_keyword_index_does() -> None:  # T-07
    """ "refunded" and "plans" answer "refund" and "plan" (the Snowball English stems the
    keyword index uses); a passage that shares only one form of one word ranks below."""
    query = "How long do I have to get a refund on an annual plan?"
    refunds = _cand("r", "Annual plans can be refunded in full within 30 days of purchase.")
    payments = _cand("p", "Bank transfers are available for annual plans above 5,000 EUR.")
    scores = await LexicalReranker().scores(query, [refunds.content, payments.content])
    assert scores == [3 / 5, 2 / 5]  # of {long, get, refund, annual, plan}
    kept, _ = await rerank(LexicalReranker(), query, [payments, refunds])
    assert [c.chunk_id for c in kept] == ["r", "p"]


def test_mmr_prefers_a_different_passage_over_a_near_copy() -> None:  # SPEC T-07
    a = _cand("a", "refund policy annual plans thirty days", 1.0)
    a_copy = _cand("b", "refund policy annual plans thirty days window", 0.95)
    other = _cand("c", "refund requests go through the billing portal", 0.8)
    assert [c.chunk_id for c in mmr([a, a_copy, other], 2)] == ["a", "c"]


def test_dedupe_drops_repeated_ids_and_texts() -> None:  # SPEC T-07
    items = [_cand("a", "Same  text"), _cand("a", "x"), _cand("b", "same text"), _cand("c", "y")]
    assert [c.chunk_id for c in dedupe(items)] == ["a", "c"]


def test_omitted_marker_shape() -> None:  # SPEC T-07
    assert omitted_marker(3) == '<omitted count=3 reason="output_budget">'


@pytest.mark.parametrize("name", ["web_fetch", "database_query", "thinking", "todo_write"])
def test_new_tools_are_in_the_catalog(name: str) -> None:
    assert name in {e.name for e in tool_catalog()}
