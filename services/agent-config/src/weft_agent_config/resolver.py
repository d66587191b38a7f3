"""AgentResolver: (tenant, agent id, request, caller) -> immutable AgentConfig
(SPEC A-04, A-08, A-09, A-11)."""

from __future__ import annotations

from pydantic import ValidationError
from weft_contracts import AgentConfig

from weft_agent_config.catalogs import BuiltinAgents
from weft_agent_config.definition import AgentDefinition, display_name, ensure_defaults
from weft_agent_config.store import AgentStore
from weft_agent_config.tool_policy import UnknownTool, runtime_tools


class AgentNotFound(LookupError):
    """No built-in or tenant agent has this id."""


class InvalidAgent(ValueError):
    """A stored agent cannot be turned into a valid configuration."""


class KnowledgeScopeDenied(PermissionError):
    """The caller's API key may not use the knowledge bases this turn would search (A-09)."""


def knowledge_scope(
    agent: AgentDefinition, requested: list[str] | None, key_kbs: list[str] | None
) -> list[str]:
    """The knowledge bases a turn searches, checked against a KB-restricted key (A-09):
    the request's explicit list wins; else the agent's scope, where ``all`` with a
    restricted key is refused and ``selected`` is checked base by base."""
    if agent.kb_selection_mode == "none":
        return []
    if requested is not None:
        _check_subset(requested, key_kbs)
        return requested
    if agent.kb_selection_mode == "selected":
        _check_subset(agent.knowledge_base_ids, key_kbs)
        return agent.knowledge_base_ids
    if key_kbs is not None:
        raise KnowledgeScopeDenied(
            "this API key is limited to some knowledge bases; an agent whose scope is all "
            "knowledge bases needs knowledge_base_ids in the request"
        )
    return []


def _check_subset(kb_ids: list[str], key_kbs: list[str] | None) -> None:
    if key_kbs is None:
        return
    denied = sorted(set(kb_ids) - set(key_kbs))
    if denied:
        raise KnowledgeScopeDenied(f"this API key may not use knowledge bases: {denied}")


def runtime_config(
    agent_id: str,
    agent: AgentDefinition,
    *,
    default_model: str,
    knowledge_base_ids: list[str],
    web_allowed: bool = True,
) -> AgentConfig:
    """The snapshot the engine runs with: defaults applied (A-04), tools registered by the
    runtime rules (A-08), web only when both agent and request allow it (A-11)."""
    full = ensure_defaults(agent, default_model)
    tools = runtime_tools(
        full.allowed_tools,
        has_kb_scope=agent.kb_selection_mode != "none",
        web_search=full.web_search_enabled and web_allowed,
        memory=bool(full.memory_enabled),
    )
    assert full.model is not None and full.max_iterations is not None
    return AgentConfig(
        agent_id=agent_id,
        name=display_name(full.name),
        mode=full.mode,
        model=full.model,
        system_prompt=full.system_prompt,
        temperature=full.temperature,
        max_iterations=full.max_iterations,
        max_completion_tokens=full.max_completion_tokens,
        llm_call_timeout_s=full.llm_call_timeout_s,
        allowed_tools=tools,
        knowledge_base_ids=knowledge_base_ids,
        history_turns=full.history_turns or 0,
        context_window=full.context_window,
        retain_retrieval_history=full.retain_retrieval_history,
        memory_enabled=bool(full.memory_enabled),
    )


class AgentResolver:
    """Looks agents up (built-ins first, then the tenant's) and resolves them."""

    def __init__(self, store: AgentStore, builtins: BuiltinAgents, default_model: str):
        self._store = store
        self._builtins = builtins
        self._default_model = default_model

    async def definition(self, tenant_id: str, agent_id: str) -> AgentDefinition:
        """The stored definition of a built-in or of the tenant's agent."""
        if agent_id in self._builtins.agents:
            return self._builtins.agents[agent_id]
        stored = await self._store.get(tenant_id, agent_id)
        if stored is None:
            raise AgentNotFound(agent_id)
        return stored.definition

    async def resolve(
        self,
        tenant_id: str,
        agent_id: str,
        knowledge_base_ids: list[str] | None = None,
        key_knowledge_base_ids: list[str] | None = None,
    ) -> AgentConfig:
        """The runtime config of ``agent_id`` for this tenant, request and caller."""
        agent = await self.definition(tenant_id, agent_id)
        scope = knowledge_scope(agent, knowledge_base_ids, key_knowledge_base_ids)
        try:
            return runtime_config(
                agent_id, agent, default_model=self._default_model, knowledge_base_ids=scope
            )
        except (ValidationError, UnknownTool) as exc:
            raise InvalidAgent(f"agent {agent_id!r} has an invalid configuration: {exc}") from exc
