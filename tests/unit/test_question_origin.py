"""A message sent by clicking a suggested question (SPEC Q-03): the gateway resolves it from
the stored set and retrieves a knowledge suggestion's source within the caller's scope;
the engine puts that source in front of the model."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi import HTTPException
from weft_contracts import QuestionOrigin
from weft_engine.question_origin import with_question_source
from weft_gateway.auth import Principal
from weft_gateway.knowledge_client import ChunkText, SourceChunk
from weft_gateway.question_origin import QuestionOrigins, SuggestionPick
from weft_llm import ChatMessage

KNOWLEDGE = {
    "id": "k0",
    "text": "What else does “Pricing” say?",
    "source": "knowledge",
    "document_id": "doc1",
    "chunk_id": "ch1",
    "knowledge_base_id": "kb1",
}


class Sets:
    async def get(self, who: Principal, session_id: str, message_id: str) -> Any:
        return {"questions": [KNOWLEDGE, {"id": "g0", "text": "Why?", "source": "generated"}]}

    async def starters(
        self, who: Principal, session_id: str, agent_id: str, locale: str | None
    ) -> Any:
        return {"questions": []}


class Documents:
    async def knowledge_base_of(self, tenant_id: str, doc_id: str) -> str | None:
        return "kb1" if (tenant_id, doc_id) == ("t1", "doc1") else None

    async def chunk(self, tenant_id: str, kb_ids: list[str], chunk_id: str) -> SourceChunk | None:
        assert kb_ids == ["kb1"]
        return SourceChunk(
            chunk_id="ch1", document_id="doc1", knowledge_base_id="kb1", title="Pricing",
            content="Plans cost 20 euros.",
        )  # fmt: skip

    async def chunks(self, tenant_id: str, doc_id: str, **_: Any) -> list[ChunkText]:
        return []


def _origins() -> QuestionOrigins:
    return QuestionOrigins(Sets(), Documents())


def _pick(question_id: str) -> SuggestionPick:
    return SuggestionPick(assistant_message_id="m1a", question_id=question_id)


async def test_a_knowledge_suggestion_brings_its_source() -> None:
    who = Principal(tenant_id="t1", user_id="u1")
    origin = await _origins().resolve(who, "s1", _pick("k0"), "a1")
    assert (origin.document_id, origin.title) == ("doc1", "Pricing")
    assert origin.excerpt == "Plans cost 20 euros."


async def test_a_source_outside_the_keys_knowledge_bases_is_not_read() -> None:  # SPEC A-09
    who = Principal(tenant_id="t1", user_id="u1", knowledge_base_ids=["kb-other"])
    origin = await _origins().resolve(who, "s1", _pick("k0"), "a1")
    assert origin.excerpt == ""


async def test_a_question_not_in_the_stored_set_is_404() -> None:
    who = Principal(tenant_id="t1", user_id="u1")
    with pytest.raises(HTTPException) as refused:
        await _origins().resolve(who, "s1", _pick("k7"), "a1")
    assert refused.value.status_code == 404


def test_a_follow_up_pick_names_its_message() -> None:
    with pytest.raises(ValueError, match="assistant_message_id"):
        SuggestionPick(question_id="k0")


def test_the_engine_appends_the_source_to_the_users_message_only() -> None:
    messages: list[ChatMessage] = [
        {"role": "system", "content": "You help."},
        {"role": "user", "content": "earlier"},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "What else?"},
    ]
    origin = QuestionOrigin(
        assistant_message_id="m1a", question_id="k0", source="knowledge",
        document_id="doc1", chunk_id="ch1", title="Pricing", excerpt="Plans cost 20 euros.",
    )  # fmt: skip
    out = with_question_source(messages, origin)
    assert out[:3] == messages[:3]
    assert "<question_source" in str(out[3]["content"])
    assert "Plans cost 20 euros." in str(out[3]["content"])
    generated = origin.model_copy(update={"source": "generated"})
    assert with_question_source(messages, generated) == messages
