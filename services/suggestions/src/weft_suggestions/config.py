"""How an agent's follow-ups are made (SPEC Q-01, Q-02), and the hash that keys a cached
set on it (Q-04): a changed configuration gets a new set instead of a stale one."""

from __future__ import annotations

import hashlib
from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

SuggestionMode = Literal["curated", "knowledge", "generated", "hybrid"]
"""SPEC Q-01: the source of the questions; hybrid (the default) mixes them."""

Category = Literal["clarify", "deepen", "action"]
"""SPEC Q-02: the kinds of follow-up the model may propose."""

ALL_CATEGORIES: tuple[Category, ...] = ("clarify", "deepen", "action")


class FollowUpConfig(BaseModel):
    """One agent's follow-up settings with the defaults of SPEC Q-01/Q-02."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    enabled: bool = Field(default=False, description="Q-01: follow-ups are off by default.")
    mode: SuggestionMode = "hybrid"
    count: int = Field(default=3, ge=1, le=5)
    model_id: str | None = Field(
        default=None, max_length=200, description="A dedicated model; None: the service's."
    )
    categories: tuple[Category, ...] = Field(default=ALL_CATEGORIES, min_length=1)
    max_context_turns: int = Field(default=2, ge=1, le=5)
    additional_instruction: str = Field(default="", max_length=2000)
    suppress_on_fallback: bool = True
    suppress_when_answer_asks_question: bool = True
    knowledge_fallback: bool = True
    allow_regenerate: bool = False
    curated: tuple[str, ...] = Field(
        default=(), max_length=20, description="Questions entered by the agent's author."
    )

    def config_hash(self) -> str:
        """SHA-256 of the canonical JSON of every field (part of the set's cache key)."""
        canonical = self.model_dump_json(exclude_none=False).encode()
        return hashlib.sha256(canonical).hexdigest()


class FollowUpConfigs(Protocol):
    """Where the follow-up settings of an agent come from."""

    async def follow_ups(self, tenant_id: str, agent_id: str) -> FollowUpConfig:
        """The settings of ``agent_id`` as ``tenant_id`` runs it."""
        ...


class FixedConfigs:
    """Every agent gets the same settings (the service's own, ``WEFT_FOLLOW_UPS``).

    The per-agent settings live in agent-config (``question_suggestions``); until this
    service asks it for them, a deployment switches follow-ups on for all agents here."""

    def __init__(self, config: FollowUpConfig):
        self._config = config

    async def follow_ups(self, tenant_id: str, agent_id: str) -> FollowUpConfig:
        """The fixed settings."""
        return self._config
