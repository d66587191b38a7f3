"""An agent's suggested-question settings (SPEC Q-01, Q-02): what agent-config stores in
the agent definition (``question_suggestions``) and the suggestions service reads back.

The defaults are the SPEC's: starters on, hybrid, 6 (1-8); follow-ups off, hybrid, 3 (1-5).
Both models refuse unknown fields and out-of-range values, so a bad setting is refused
when the agent is saved (422) instead of when a set is generated.
"""

from __future__ import annotations

import hashlib
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

SuggestionMode = Literal["curated", "knowledge", "generated", "hybrid"]
"""SPEC Q-01: the source of the questions; hybrid (the default) mixes them."""

Category = Literal["clarify", "deepen", "action"]
"""SPEC Q-02: the kinds of follow-up the model may propose."""

ALL_CATEGORIES: tuple[Category, ...] = ("clarify", "deepen", "action")

LEGACY_MODES: dict[str, SuggestionMode] = {"llm": "generated", "static": "curated"}
"""Mode names of earlier stored agents, read as today's."""

MAX_INSTRUCTION_CHARS = 2000
MAX_CURATED = 20


def _mode(value: Any) -> Any:
    return LEGACY_MODES.get(value, value) if isinstance(value, str) else value


class _Hashed(BaseModel):
    def config_hash(self) -> str:
        """SHA-256 of the canonical JSON of every field (part of a set's cache key, Q-04):
        a changed setting gets a new set instead of a stale one."""
        canonical = self.model_dump_json(exclude_none=False).encode()
        return hashlib.sha256(canonical).hexdigest()


class FollowUpConfig(_Hashed):
    """One agent's follow-up settings with the defaults of SPEC Q-01/Q-02."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    enabled: bool = Field(default=False, description="Q-01: follow-ups are off by default.")
    mode: SuggestionMode = "hybrid"
    count: int = Field(default=3, ge=1, le=5)
    model_id: str | None = Field(
        default=None, max_length=200, description="A dedicated model; None: the service's."
    )
    categories: tuple[Category, ...] = Field(default=ALL_CATEGORIES, min_length=1, max_length=3)
    max_context_turns: int = Field(default=2, ge=1, le=5)
    additional_instruction: str = Field(default="", max_length=MAX_INSTRUCTION_CHARS)
    suppress_on_fallback: bool = True
    suppress_when_answer_asks_question: bool = True
    knowledge_fallback: bool = True
    allow_regenerate: bool = False
    curated: tuple[str, ...] = Field(
        default=(), max_length=MAX_CURATED, description="Questions entered by the agent's author."
    )

    _legacy_mode = field_validator("mode", mode="before")(_mode)

    @field_validator("curated")
    @classmethod
    def _short_questions(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if any(len(q) > 500 for q in value):
            raise ValueError("a curated question is at most 500 characters")
        return value


class StarterConfig(_Hashed):
    """The questions offered in an empty session (SPEC Q-01: on, hybrid, 6 of 1-8)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    enabled: bool = True
    mode: SuggestionMode = "hybrid"
    count: int = Field(default=6, ge=1, le=8)
    model_id: str | None = Field(default=None, max_length=200)
    additional_instruction: str = Field(default="", max_length=MAX_INSTRUCTION_CHARS)
    curated: tuple[str, ...] = Field(default=(), max_length=MAX_CURATED)

    _legacy_mode = field_validator("mode", mode="before")(_mode)

    @field_validator("curated")
    @classmethod
    def _short_questions(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if any(len(q) > 500 for q in value):
            raise ValueError("a curated question is at most 500 characters")
        return value


class QuestionSuggestions(BaseModel):
    """An agent's ``question_suggestions``: starters and follow-ups (SPEC A-04, Q-01)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    starters: StarterConfig = Field(default_factory=StarterConfig)
    follow_ups: FollowUpConfig = Field(default_factory=FollowUpConfig)


class AgentSuggestionSettings(BaseModel):
    """What agent-config tells the suggestions service about one agent of one tenant:
    its settings, and what a generated or knowledge starter is made from."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    agent_id: str
    name: str = ""
    description: str = Field(default="", max_length=4000)
    settings: QuestionSuggestions = Field(default_factory=QuestionSuggestions)
    knowledge_titles: list[KnowledgeTitle] = Field(default_factory=list, max_length=20)


class KnowledgeTitle(BaseModel):
    """A document of the agent's knowledge bases that a knowledge starter may name."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    title: str = Field(max_length=500)
    document_id: str
    knowledge_base_id: str
    chunk_id: str | None = None


AgentSuggestionSettings.model_rebuild()
