"""Session notices on ``weft.session.notices.v1``: session events that are not a turn's
(ARCHITECTURE "Topics"). Services other than the engine write them; the gateway projector
copies them into the session's stream with their own ids.

``request_id`` of a notice names the turn it follows (a turn's follow-ups), and ``seq``
stays 0: only ``agent.events`` carry a per-turn sequence.
"""

from __future__ import annotations

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


SessionNotice = Annotated[SuggestionsReady | ApprovalEscalated, Field(discriminator="type")]
"""Any message of ``weft.session.notices.v1``."""
