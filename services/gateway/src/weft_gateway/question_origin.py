"""A chat message sent by clicking a suggested question (SPEC Q-03): the gateway resolves
the question from the stored set (never from ids the client sends) and, for a knowledge
suggestion, retrieves its source before the turn starts, so the engine can put it in
front of the model (``ChatRequestedData.question_origin``).

Why here: the gateway knows the caller's knowledge scope (a KB-restricted key, SPEC
A-09) and asks knowledge with the caller's credential; the source is read as the caller
may read it, or not at all. A source deleted since the set was made leaves the question
without context: the turn still runs, the model searches as usual."""

# No ``from __future__ import annotations``: FastAPI reads ChatBody's annotations.

from typing import Any, Literal, Protocol

import structlog
from fastapi import HTTPException
from pydantic import BaseModel, ConfigDict, Field, model_validator
from weft_contracts import QuestionOrigin

from weft_gateway.auth import Principal
from weft_gateway.knowledge_client import ChunkText, SourceChunk
from weft_gateway.knowledge_scope import key_reaches

log = structlog.get_logger(__name__)

MAX_EXCERPT_CHARS = 8_000
DOCUMENT_CHUNKS = 4
"""A knowledge suggestion without a chunk brings this many first chunks of its document."""


class SuggestionPick(BaseModel):
    """Which suggested question the message comes from (``suggestion`` of a chat body)."""

    model_config = ConfigDict(extra="forbid")

    placement: Literal["follow_up", "starter"] = "follow_up"
    assistant_message_id: str | None = Field(default=None, min_length=2, max_length=128)
    question_id: str = Field(min_length=1, max_length=64)

    @model_validator(mode="after")
    def _message_of_a_follow_up(self) -> "SuggestionPick":
        if self.placement == "follow_up" and not self.assistant_message_id:
            raise ValueError("a follow-up names its assistant_message_id")
        return self


class SuggestionSets(Protocol):
    """The suggestions service as the gateway calls it."""

    async def get(self, who: Principal, session_id: str, message_id: str) -> Any: ...

    async def starters(
        self, who: Principal, session_id: str, agent_id: str, locale: str | None
    ) -> Any: ...


class KnowledgeSources(Protocol):
    """What a question origin reads of knowledge (``KnowledgeClient``)."""

    async def knowledge_base_of(self, tenant_id: str, doc_id: str) -> str | None: ...

    async def chunk(
        self, tenant_id: str, kb_ids: list[str], chunk_id: str
    ) -> SourceChunk | None: ...

    async def chunks(self, tenant_id: str, doc_id: str, *, limit: int) -> list[ChunkText]: ...


class QuestionOrigins:
    """Resolves a :class:`SuggestionPick` into the turn's :class:`QuestionOrigin`."""

    def __init__(self, sets: SuggestionSets, documents: KnowledgeSources):
        self._sets = sets
        self._documents = documents

    async def resolve(
        self,
        who: Principal,
        session_id: str,
        pick: SuggestionPick,
        agent_id: str,
        locale: str | None = None,
    ) -> QuestionOrigin:
        """The clicked question with its source; 404 when the set or question is not the
        caller's. A starter is looked up in the set of the user's ``locale``, the one the
        user was shown."""
        if pick.placement == "starter":
            found = await self._sets.starters(who, session_id, agent_id, locale)
            message_id = f"agent:{agent_id}"
        else:
            assert pick.assistant_message_id is not None
            found = await self._sets.get(who, session_id, pick.assistant_message_id)
            message_id = pick.assistant_message_id
        questions = found.get("questions", []) if isinstance(found, dict) else []
        question = next((q for q in questions if q.get("id") == pick.question_id), None)
        if question is None:
            raise HTTPException(404, f"suggested question {pick.question_id!r} not found")
        origin = QuestionOrigin(
            assistant_message_id=message_id[:128],
            question_id=pick.question_id,
            source=question["source"],
            document_id=question.get("document_id"),
            chunk_id=question.get("chunk_id"),
            knowledge_base_id=question.get("knowledge_base_id"),
        )
        if origin.source != "knowledge" or not origin.document_id:
            return origin
        return await self._with_source(who, origin)

    async def _with_source(self, who: Principal, origin: QuestionOrigin) -> QuestionOrigin:
        assert origin.document_id is not None
        kb_id = await self._documents.knowledge_base_of(who.tenant_id, origin.document_id)
        if kb_id is None or not key_reaches(who, kb_id):
            log.info("question_source_unavailable", document_id=origin.document_id)
            return origin
        title, text = "", ""
        if origin.chunk_id:
            hit = await self._documents.chunk(who.tenant_id, [kb_id], origin.chunk_id)
            if hit is not None and hit.document_id == origin.document_id:
                title, text = hit.title, hit.content
        if not text:
            chunks = await self._documents.chunks(
                who.tenant_id, origin.document_id, limit=DOCUMENT_CHUNKS
            )
            text = "\n".join(c.content for c in chunks)
        return origin.model_copy(
            update={
                "knowledge_base_id": kb_id,
                "title": title[:500],
                "excerpt": text[:MAX_EXCERPT_CHARS],
            }
        )
