"""``GET /internal/suggestion-settings/{agent_id}``: an agent's suggested-question settings
(SPEC Q-01/Q-02) as the suggestions service reads them, with what its starters are made
from (name, description, a few document titles of its knowledge bases).

It is a system route: the suggestions service works from Kafka records and its sweeper,
long after the user's request credential has expired, so it presents its own service
credential with the one scope ``agent-config:suggestion-settings``, which opens this route
and nothing else. The agent is looked up as ``tenant_id`` runs it (built-in, own, shared
with it), so a tenant never gets another tenant's unshared agent.
"""

# No ``from __future__ import annotations``: FastAPI reads the route annotations.

from typing import Annotated

import structlog
from fastapi import APIRouter, HTTPException, Query
from weft_contracts import AgentSuggestionSettings, KnowledgeTitle, QuestionSuggestions
from weft_platform.internal_auth import SystemRoute

from weft_agent_config.definition import AgentDefinition, display_name
from weft_agent_config.knowledge_client import KnowledgeService
from weft_agent_config.resolver import (
    AgentNotFound,
    AgentResolver,
    AgentUnavailable,
    SharedAgentDisabled,
)

log = structlog.get_logger(__name__)

PATH = "/internal/suggestion-settings/{agent_id}"
SCOPE = "agent-config:suggestion-settings"
ROUTE = SystemRoute(SCOPE, frozenset({"suggestions", "operator"}))
MAX_TITLES = 8
"""Knowledge starters name at most this many documents (Q-01 starters are 8 at most)."""


class KnowledgeTitles:
    """The newest ready documents of an agent's knowledge bases, within one tenant, asked
    of the knowledge service. Best effort: knowledge unreachable gives no titles (the
    settings are still answered; knowledge starters then have no document to name)."""

    def __init__(self, knowledge: KnowledgeService):
        self._knowledge = knowledge

    async def of(self, tenant_id: str, agent: AgentDefinition) -> list[KnowledgeTitle]:
        """Titles for knowledge starters; none for an agent without knowledge."""
        if agent.kb_selection_mode == "none":
            return []
        kb_ids: list[str] = []
        if agent.kb_selection_mode == "selected":
            if not agent.knowledge_base_ids:
                return []
            kb_ids = list(agent.knowledge_base_ids)
        try:
            found = await self._knowledge.titles(tenant_id, kb_ids, MAX_TITLES)
        except HTTPException as exc:
            log.warning("knowledge_titles_unavailable", reason=str(exc.detail))
            return []
        return [KnowledgeTitle.model_validate(t) for t in found]


def suggestion_settings_router(resolver: AgentResolver, titles: KnowledgeTitles) -> APIRouter:
    """The one route of this module."""
    router = APIRouter(tags=["suggestions"])
    Tenant = Annotated[str, Query(min_length=1, max_length=128)]

    @router.get(PATH, response_model=AgentSuggestionSettings)
    async def settings(agent_id: str, tenant_id: Tenant) -> AgentSuggestionSettings:
        try:
            found = await resolver.find(tenant_id, agent_id)
        except (AgentNotFound, AgentUnavailable, SharedAgentDisabled):
            raise HTTPException(404, f"agent {agent_id!r} not found") from None
        agent = found.definition
        return AgentSuggestionSettings(
            agent_id=agent_id,
            name=display_name(agent.name)[:200],
            description=display_name(agent.description)[:4000],
            settings=agent.question_suggestions or QuestionSuggestions(),
            knowledge_titles=await titles.of(found.owner_tenant_id or tenant_id, agent),
        )

    return router
