"""Follow-up sets without infrastructure (SPEC Q-01..Q-03): the filters, suppression, the
sources by mode, and what the model is asked; the model is an in-process FunctionModel."""

from __future__ import annotations

import pytest
from weft_contracts import SuggestedQuestion
from weft_llm import LLMCallError
from weft_suggestions.config import FollowUpConfig
from weft_suggestions.filters import AnsweredTurn, asks_question, keep, suppression
from weft_suggestions.generation import (
    Exchange,
    FollowUpGenerator,
    FollowUpRequest,
    GenerationFailed,
    parse_questions,
)
from weft_testkit.function_model import answer, replies

REFS = [
    {"title": "Pricing guide", "document_id": "d1", "chunk_id": "c1", "knowledge_base_id": "kb"},
    {"title": "Pricing guide", "document_id": "d1", "chunk_id": "c2", "knowledge_base_id": "kb"},
    {"title": "Refund policy", "document_id": "d2", "chunk_id": "c3", "knowledge_base_id": "kb"},
]
QUESTION = "What does the Pro plan cost?"


def _q(text: str) -> SuggestedQuestion:
    return SuggestedQuestion(id=text[:8] or "x", text=text, source="generated")


def _request(config: FollowUpConfig, *, exchanges: int = 1) -> FollowUpRequest:
    past = [
        Exchange(question=f"old question {i}", answer=f"old answer {i}")
        for i in range(exchanges - 1)
    ]
    past.append(Exchange(question=QUESTION, answer="It costs 20 euros a month."))
    return FollowUpRequest(exchanges=past, references=REFS, config=config)


def test_the_users_own_question_is_never_suggested_back() -> None:  # SPEC Q-03
    kept = keep(
        [
            _q("what does the pro plan cost"),
            _q("Is there a yearly plan?"),
            _q("IS THERE a yearly plan"),
        ],
        user_question=QUESTION,
        count=3,
    )
    assert [q.text for q in kept] == ["Is there a yearly plan?"]


def test_keep_stops_at_the_count_in_order() -> None:  # SPEC Q-01
    kept = keep([_q(f"question {i}?") for i in range(6)], user_question=QUESTION, count=3)
    assert [q.text for q in kept] == ["question 0?", "question 1?", "question 2?"]


@pytest.mark.parametrize(
    ("turn", "config", "reason"),
    [
        (
            AnsweredTurn(status="failed", answer="x", is_fallback=False),
            FollowUpConfig(),
            "turn_not_completed",
        ),
        (
            AnsweredTurn(status="completed", answer=" ", is_fallback=False),
            FollowUpConfig(),
            "empty_answer",
        ),
        (
            AnsweredTurn(status="completed", answer="x", is_fallback=True),
            FollowUpConfig(),
            "fallback_answer",
        ),
        (
            AnsweredTurn(status="completed", answer="x", is_fallback=True),
            FollowUpConfig(suppress_on_fallback=False),
            None,
        ),
        (
            AnsweredTurn(status="completed", answer="Which plan do you use?**", is_fallback=False),
            FollowUpConfig(),
            "answer_asks_question",
        ),
        (
            AnsweredTurn(status="completed", answer="Which plan do you use?", is_fallback=False),
            FollowUpConfig(suppress_when_answer_asks_question=False),
            None,
        ),
        (
            AnsweredTurn(status="completed", answer="It costs 20.", is_fallback=False),
            FollowUpConfig(),
            None,
        ),
    ],
)
def test_suppression_rules(turn: AnsweredTurn, config: FollowUpConfig, reason: str | None) -> None:
    assert suppression(turn, config) == reason  # SPEC Q-02


def test_a_question_in_the_middle_does_not_count_as_asking() -> None:
    assert not asks_question("Why? Because the plan is cheaper. Done.")
    assert asks_question("Voulez-vous le détail\uff1f")


def test_defaults_are_the_spec_ones() -> None:  # SPEC
    c = FollowUpConfig()
    assert (c.enabled, c.mode, c.count, c.max_context_turns) == (False, "hybrid", 3, 2)
    assert c.categories == ("clarify", "deepen", "action")
    assert c.suppress_on_fallback and c.suppress_when_answer_asks_question and c.knowledge_fallback
    assert not c.allow_regenerate
    assert FollowUpConfig(count=4).config_hash() != c.config_hash()


def test_parse_questions_reads_the_array_and_skips_bad_items() -> None:
    content = (
        'Here you go:\n```json\n[{"text": "Is VAT included?", "category": "clarify"}, '
        '"How do I upgrade?", {"text": "Any discount?", "category": "action"}, '
        '{"nope": 1}, {"text": "Other?", "category": "deepen"}]\n```'
    )
    found = parse_questions(content, ("clarify", "action"))
    assert [(q.text, q.category) for q in found] == [
        ("Is VAT included?", "clarify"),
        ("How do I upgrade?", None),
        ("Any discount?", "action"),
    ]
    with pytest.raises(GenerationFailed):
        parse_questions("I cannot help with that.", ("clarify",))


async def test_hybrid_fills_the_quota_with_knowledge() -> None:  # SPEC
    model = replies(answer(f'["{QUESTION}", "Is there a yearly plan?"]'))
    generator = FollowUpGenerator(model, "m")
    questions = await generator.questions(_request(FollowUpConfig(enabled=True, count=3)))
    assert [q.source for q in questions] == ["generated", "knowledge", "knowledge"]
    assert questions[0].text == "Is there a yearly plan?"
    assert [q.document_id for q in questions[1:]] == ["d1", "d2"]
    assert questions[1].chunk_id == "c1"


async def test_generated_falls_back_to_knowledge_when_the_model_fails() -> None:  # SPEC Q-02
    model = replies(LLMCallError("boom", status=400))
    generator = FollowUpGenerator(model, "m")
    config = FollowUpConfig(enabled=True, mode="generated", count=2)
    questions = await generator.questions(_request(config))
    assert [q.source for q in questions] == ["knowledge", "knowledge"]

    strict = FollowUpConfig(enabled=True, mode="generated", knowledge_fallback=False)
    with pytest.raises(GenerationFailed):
        await FollowUpGenerator(replies(answer("no array")), "m").questions(_request(strict))


async def test_curated_and_knowledge_modes_never_call_the_model() -> None:  # SPEC Q-01
    model = replies()
    generator = FollowUpGenerator(model, "m")
    curated = FollowUpConfig(enabled=True, mode="curated", curated=("Show me the plans", QUESTION))
    assert [q.text for q in await generator.questions(_request(curated))] == ["Show me the plans"]
    knowledge = FollowUpConfig(enabled=True, mode="knowledge")
    assert len(await generator.questions(_request(knowledge))) == 2
    assert model.calls == []


async def test_the_model_gets_the_configured_context_and_instruction() -> None:  # SPEC Q-02
    model = replies(answer('["Next?"]'))
    config = FollowUpConfig(
        enabled=True,
        mode="generated",
        model_id="small-model",
        max_context_turns=2,
        categories=("deepen",),
        additional_instruction="Always mention invoices.",
    )
    await FollowUpGenerator(model, "default-model").questions(_request(config, exchanges=4))
    request = model.requests[0]
    assert request.model == "small-model"
    system = str(request.messages[0]["content"])
    assert "deepen" in system and "clarify" not in system
    assert "Always mention invoices." in system
    texts = [str(m["content"]) for m in request.messages[1:]]
    assert "old question 2" in texts and QUESTION in texts
    assert "old question 1" not in texts and "old question 0" not in texts
