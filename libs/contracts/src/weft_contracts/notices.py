"""Session notices on ``weft.session.notices.v1``: session events that are not a turn's
(ARCHITECTURE "Topics"). Services other than the engine write them; the gateway projector
copies them into the session's stream with their own ids.

``request_id`` of a notice names the turn it follows (a turn's follow-ups), and ``seq``
stays 0: only ``agent.events`` carry a per-turn sequence.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import Field

from weft_contracts.approvals import ApprovalEscalated
from weft_contracts.envelope import Envelope, Payload
from weft_contracts.text import CleanText

SuggestionSource = Literal["curated", "knowledge", "generated"]
"""Where one suggested question came from (SPEC Q-01 modes; hybrid mixes them)."""

SuggestionPlacement = Literal["starter", "follow_up"]
"""Starters open an empty session; follow-ups come after an answer (SPEC Q-01)."""


class SuggestedQuestion(Payload):
    """One clickable question; a knowledge suggestion names the source its answer must
    retrieve first (SPEC Q-03)."""

    id: str = Field(min_length=1, max_length=64, description="Stable within its set.")
    text: CleanText = Field(min_length=1, max_length=500)
    source: SuggestionSource
    category: Literal["clarify", "deepen", "action"] | None = None
    document_id: str | None = None
    chunk_id: str | None = None
    knowledge_base_id: str | None = None


class SuggestionsReadyData(Payload):
    """A suggestion set finished (SPEC Q-04): ``ready`` with its questions, or
    ``suppressed`` / ``failed`` with none, so a client stops waiting either way."""

    assistant_message_id: str = Field(min_length=1, max_length=128)
    placement: SuggestionPlacement
    locale: str = Field(min_length=1, max_length=35)
    state: Literal["ready", "suppressed", "failed"]
    questions: list[SuggestedQuestion] = Field(default_factory=list, max_length=8)
    reason: str = Field(default="", max_length=200, description="Why suppressed or failed.")


class SuggestionsReady(Envelope):
    """Suggested questions of a session are ready."""

    type: Literal["suggestions_ready"] = "suggestions_ready"
    data: SuggestionsReadyData


KnowledgeStage = Literal["wiki", "graph"]
"""Work done on a document after its ingestion: wiki pages (SPEC T-18) or its knowledge
graph (SPEC T-10)."""

KnowledgeProgressState = Literal["done", "retrying", "paused", "failed"]
"""How one attempt ended: ``done``; ``retrying`` (failed, tried again later); ``paused``
(the tenant is over a token budget, resumes at ``resumes_at``); ``failed`` for good."""


class KnowledgeProgressData(Payload):
    """One document's wiki or graph work moved on, with where its knowledge base stands,
    so a client following the session that uploaded it shows progress without polling
    the KB (``GET /api/v1/knowledge-bases/{id}`` and ``.../wiki`` say the same)."""

    knowledge_base_id: str = Field(min_length=1, max_length=64)
    document_id: str = Field(min_length=1, max_length=64)
    stage: KnowledgeStage
    state: KnowledgeProgressState
    reason: str = Field(default="", max_length=1000, description="Why retrying, paused or failed.")
    resumes_at: datetime | None = Field(default=None, description="When a paused one resumes.")
    documents: dict[str, Annotated[int, Field(ge=0)]] = Field(
        default_factory=dict,
        max_length=8,
        description="The KB's documents by status of this stage (pending, done, failed...).",
    )
    totals: dict[str, Annotated[int, Field(ge=0)]] = Field(
        default_factory=dict,
        max_length=8,
        description="What the KB holds of this stage: pages; or entities and relations.",
    )


class KnowledgeProgress(Envelope):
    """A document's wiki generation or graph extraction attempt ended (knowledge)."""

    type: Literal["knowledge_progress"] = "knowledge_progress"
    data: KnowledgeProgressData


SessionNotice = Annotated[
    SuggestionsReady | ApprovalEscalated | KnowledgeProgress, Field(discriminator="type")
]
"""Any message of ``weft.session.notices.v1``."""
