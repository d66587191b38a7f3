"""How an agent's suggestions are made (SPEC Q-01, Q-02) and where those settings come
from. The settings themselves are ``weft_contracts.suggestions``: agent-config stores them
in the agent definition and this service reads them back (:mod:`weft_suggestions.agent_settings`);
their hash keys a cached set (Q-04), so a changed setting gets a new set."""

from __future__ import annotations

from typing import Protocol

from weft_contracts import AgentSuggestionSettings, FollowUpConfig, QuestionSuggestions
from weft_contracts.suggestions import ALL_CATEGORIES, Category, SuggestionMode

__all__ = [
    "ALL_CATEGORIES",
    "AgentSettings",
    "Category",
    "FixedConfigs",
    "FollowUpConfig",
    "FollowUpConfigs",
    "SuggestionMode",
]


class FollowUpConfigs(Protocol):
    """Where the follow-up settings of an agent come from."""

    async def follow_ups(self, tenant_id: str, agent_id: str) -> FollowUpConfig:
        """The settings of ``agent_id`` as ``tenant_id`` runs it."""
        ...


class AgentSettings(FollowUpConfigs, Protocol):
    """Follow-up settings, and everything a starter set is made from."""

    async def agent(self, tenant_id: str, agent_id: str) -> AgentSuggestionSettings:
        """The agent's settings, name, description and knowledge titles; an unknown
        agent raises :class:`UnknownAgent`."""
        ...


class UnknownAgent(LookupError):
    """The tenant has no agent of that id (deleted, or never its own)."""


class FixedConfigs:
    """Every agent gets the same settings: the operator's override (``WEFT_FOLLOW_UPS``)
    or the service-wide off switch, instead of each agent's own."""

    def __init__(self, config: FollowUpConfig, starters_enabled: bool = True):
        self._config = config
        self._settings = QuestionSuggestions(follow_ups=config)
        if not starters_enabled:
            self._settings = self._settings.model_copy(
                update={"starters": self._settings.starters.model_copy(update={"enabled": False})}
            )

    async def follow_ups(self, tenant_id: str, agent_id: str) -> FollowUpConfig:
        """The fixed settings."""
        return self._config

    async def agent(self, tenant_id: str, agent_id: str) -> AgentSuggestionSettings:
        """The fixed settings, without name, description or knowledge."""
        return AgentSuggestionSettings(agent_id=agent_id, settings=self._settings)
