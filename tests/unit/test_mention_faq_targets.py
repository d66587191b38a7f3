"""SPEC A-11 in the gateway: how a request's mentions, resolved by knowledge, narrow the
turn's agent snapshot (documents, FAQ tags, knowledge bases), and that a resolution
selecting no knowledge base is refused rather than widening the turn to all of them."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi import HTTPException
from weft_contracts import AgentConfig
from weft_gateway.mentions import Mention, MentionResolver


class FakeKnowledge:
    def __init__(self, answer: dict[str, Any]):
        self.answer = answer
        self.sent: list[dict[str, Any]] = []

    async def call(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        assert (method, path) == ("POST", "/internal/search-targets")
        self.sent.append(kwargs["json"])
        return self.answer


AGENT = AgentConfig(
    agent_id="a", model="m", allowed_tools=["search_knowledge"],
    knowledge_base_ids=["kb_docs", "kb_faq", "kb_other"],
)  # fmt: skip


async def _narrow(answer: dict[str, Any], mentions: list[Mention]) -> AgentConfig:
    resolver = MentionResolver(FakeKnowledge(answer))  # type: ignore[arg-type]
    return await resolver.narrow("t", AGENT, mentions)


async def test_a_tag_only_faq_entries_carry_narrows_to_their_base_and_no_document() -> None:
    answer = {"targets": [], "faq_targets": [{"knowledge_base_id": "kb_faq", "tag": "support"}]}
    narrowed = await _narrow(answer, [Mention(type="tag", value="support")])
    assert narrowed.knowledge_base_ids == ["kb_faq"]
    assert narrowed.search_document_ids == [] and narrowed.search_faq_tags == ["support"]


async def test_documents_and_faq_entries_of_one_tag_are_both_kept() -> None:
    answer = {
        "targets": [{"knowledge_base_id": "kb_docs", "document_id": "doc_1"}],
        "faq_targets": [{"knowledge_base_id": "kb_faq", "tag": "pro"}],
    }
    narrowed = await _narrow(answer, [Mention(type="tag", value="pro")])
    assert narrowed.knowledge_base_ids == ["kb_docs", "kb_faq"]
    assert narrowed.search_document_ids == ["doc_1"] and narrowed.search_faq_tags == ["pro"]


async def test_an_older_knowledge_without_faq_targets_still_narrows_to_documents() -> None:
    answer = {"targets": [{"knowledge_base_id": "kb_docs", "document_id": "doc_1"}]}
    narrowed = await _narrow(answer, [Mention(type="doc", value="doc_1")])
    assert narrowed.knowledge_base_ids == ["kb_docs"] and narrowed.search_faq_tags == []


async def test_a_resolution_selecting_nothing_is_refused_never_widened() -> None:
    """An empty knowledge_base_ids means every KB of the tenant: a mention must never
    turn into that."""
    with pytest.raises(HTTPException) as refused:
        await _narrow({"targets": [], "faq_targets": []}, [Mention(type="tag", value="x")])
    assert refused.value.status_code == 422
