"""AgentResolver: (tenant, agent id, request, caller) -> immutable AgentConfig
(SPEC A-04, A-08, A-09, A-11)."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from pydantic import ValidationError
from weft_contracts import (
    AgentConfig,
    AgentMode,
    ApprovalPolicy,
    KnowledgeBaseInfo,
    ReasoningEffort,
    SkillInfo,
)
from weft_contracts.agent import FaqSettings
from weft_contracts.mcp import DEFAULT_AUTH_WAIT_S, McpServerRef
from weft_storage.agent_config.skills import SkillStore
from weft_tool_catalog.capabilities import KBCapability
from weft_tool_catalog.sandbox_specs import SKILL_INSTALLER_AGENT
from weft_tool_catalog.wiki_specs import WIKI_WRITE_TOOLS

from weft_agent_config.catalogs import BuiltinAgents
from weft_agent_config.definition import (
    AgentDefinition,
    display_name,
    effective_reasoning_effort,
    ensure_defaults,
    synthesis_reasoning_effort,
)
from weft_agent_config.knowledge_guard import (
    KnowledgeDirectory,
    UnknownKnowledgeBase,
    capable_tools,
    tool_requirements,
)
from weft_agent_config.mcp.store import McpStore
from weft_agent_config.model_capabilities import ModelCapabilities
from weft_agent_config.sharing import SharingStore
from weft_agent_config.store import AgentStore
from weft_agent_config.tool_policy import UnknownTool, runtime_tools, without_wiki_writes

KNOWLEDGE_BASES_PLACEHOLDER = re.compile(r"\{\{\s*knowledge_bases\s*\}\}")
"""The placeholder whose value needs the KBs' names (the engine's syntax)."""
MAX_NAMED_KNOWLEDGE_BASES = 50
"""A tenant-wide scope names at most this many KBs in the prompt."""
MAX_SCOPE_KNOWLEDGE_BASES = 500
"""A tenant-wide scope's capabilities are those of its first this many KBs (the lookup's
own bound)."""
SKILL_INSTALLER = SKILL_INSTALLER_AGENT
"""In skill-install mode the prompt lists no skills (the reference's rule)."""
MAX_LISTED_SKILLS = 100


class AgentNotFound(LookupError):
    """No built-in or tenant agent has this id."""


class InvalidAgent(ValueError):
    """A stored agent cannot be turned into a valid configuration."""


class AgentUnavailable(ValueError):
    """A built-in whose tools do not exist yet: it cannot run a turn."""


class SharedAgentDisabled(PermissionError):
    """The caller's tenant switched this shared agent off (SPEC A-10)."""


class InvalidRequest(ValueError):
    """The chat request does not fit the agent (HTTP 400)."""


class KnowledgeScopeDenied(PermissionError):
    """The caller's API key may not use the knowledge bases this turn would search (A-09)."""


def knowledge_scope(
    agent: AgentDefinition, requested: list[str] | None, key_kbs: list[str] | None
) -> list[str]:
    """The knowledge bases a turn searches, checked against a KB-restricted key (A-09):
    the request's explicit list wins; else the agent's scope, where ``all`` with a
    restricted key is refused and ``selected`` is checked base by base. Downstream an
    empty scope means every knowledge base of the tenant, so a restricted key never gets
    one: an explicit ``[]`` or a selected agent without KBs is refused too."""
    if agent.kb_selection_mode == "none":
        return []
    if requested is not None:
        scope = requested
    elif agent.kb_selection_mode == "selected":
        scope = agent.knowledge_base_ids
    elif key_kbs is not None:
        raise KnowledgeScopeDenied(
            "this API key is limited to some knowledge bases; an agent whose scope is all "
            "knowledge bases needs knowledge_base_ids in the request"
        )
    else:
        return []
    _check_subset(scope, key_kbs)
    if key_kbs is not None and not scope:
        raise KnowledgeScopeDenied(
            "this API key is limited to some knowledge bases; an empty knowledge base list "
            "would mean all of them: name the knowledge bases to use"
        )
    return scope


def _check_subset(kb_ids: list[str], key_kbs: list[str] | None) -> None:
    if key_kbs is None:
        return
    denied = sorted(set(kb_ids) - set(key_kbs))
    if denied:
        raise KnowledgeScopeDenied(f"this API key may not use knowledge bases: {denied}")


@dataclass(frozen=True, kw_only=True)
class TurnOverrides:
    """What a chat request may change for its own turn."""

    reasoning_effort: ReasoningEffort | None = None
    """SPEC A-05: wins over the agent's ``reasoning_effort`` and ``thinking``."""
    summary_model_id: str | None = None
    """The answering model for this turn; ignored for shared agents (A-10)."""
    web_allowed: bool = True


def faq_settings(agent: AgentDefinition) -> FaqSettings:
    """SPEC C-04's FAQ priority, intent detection and expansion: quick-answer's pipeline
    only (a smart-reasoning model reads every result itself)."""
    if agent.mode != AgentMode.QUICK_ANSWER:
        return FaqSettings()
    return FaqSettings(
        priority_enabled=agent.faq_priority_enabled,
        direct_answer_threshold=agent.faq_direct_answer_threshold,
        score_boost=agent.faq_score_boost,
        intent_detection=agent.intent_detection_enabled,
        query_expansion=agent.query_expansion_enabled,
    )


def runtime_config(
    agent_id: str,
    agent: AgentDefinition,
    *,
    default_model: str,
    knowledge_base_ids: list[str],
    overrides: TurnOverrides = TurnOverrides(),
    models: ModelCapabilities | None = None,
) -> AgentConfig:
    """The snapshot the engine runs with: defaults applied (A-04), tools registered by the
    runtime rules (A-08), web only when both agent and request allow it (A-11), reasoning
    effort and vision resolved for the model (A-05, E-26)."""
    full = ensure_defaults(agent, default_model)
    if overrides.summary_model_id:
        full = full.model_copy(update={"model": overrides.summary_model_id})
    tools = runtime_tools(
        full.allowed_tools,
        has_kb_scope=agent.kb_selection_mode != "none",
        web_search=full.web_search_enabled and overrides.web_allowed,
        memory=bool(full.memory_enabled),
        sandbox=bool(full.sandbox_enabled),
        skill_installer=agent_id == SKILL_INSTALLER,
    )
    assert full.model is not None and full.max_iterations is not None
    levels = models.reasoning_levels(full.model) if models else None
    effort = effective_reasoning_effort(
        full.reasoning_effort,
        full.thinking,
        request_override=overrides.reasoning_effort,
        supported=levels,
    )
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
        web_search_max_results=full.web_search_max_results or 5,
        query_rewrite=full.mode == AgentMode.QUICK_ANSWER and full.query_rewrite_enabled,
        faq=faq_settings(full),
        reasoning_effort=effort,
        synthesis_reasoning_effort=synthesis_reasoning_effort(effort, levels),
        image_upload_enabled=full.image_upload_enabled,
        vision=models.supports_vision(full.model) if models else False,
        vlm_model=full.vlm_model_id or None,
        approval=ApprovalPolicy(
            access_level=full.access_level or "auto_write",
            timeout_s=full.approval_timeout_s,
            on_timeout=full.approval_on_timeout,
            approver_group=full.approver_group,
            escalation_timeout_s=full.escalation_timeout_s,
            always_ask=sorted(set(full.always_ask_tools) & set(tools)),
        ),
    )


@dataclass(frozen=True, kw_only=True)
class FoundAgent:
    """A definition the caller may run, and whose it is."""

    definition: AgentDefinition
    owner_tenant_id: str | None = None
    """Set for an agent another tenant shared with the caller (SPEC A-10)."""


class AgentResolver:
    """Looks agents up (built-ins, then the tenant's, then those shared with it) and
    resolves them."""

    def __init__(
        self,
        store: AgentStore,
        builtins: BuiltinAgents,
        default_model: str,
        *,
        models: ModelCapabilities | None = None,
        knowledge: KnowledgeDirectory | None = None,
        sharing: SharingStore | None = None,
        skills: SkillStore | None = None,
        mcp: McpStore | None = None,
    ):
        self._mcp = mcp
        self._skills = skills
        self._store = store
        self._builtins = builtins
        self._default_model = default_model
        self._models = models
        self._knowledge = knowledge
        self._sharing = sharing

    async def find(self, tenant_id: str, agent_id: str) -> FoundAgent:
        """A built-in, the tenant's own agent, or an enabled agent shared with it."""
        if agent_id in self._builtins.agents:
            if reason := self._builtins.unavailable.get(agent_id):
                raise AgentUnavailable(f"agent {agent_id!r} is not available: {reason}")
            return FoundAgent(definition=self._builtins.agents[agent_id])
        stored = await self._store.get(tenant_id, agent_id)
        if stored is not None:
            return FoundAgent(definition=stored.definition)
        ref = await self._sharing.find_shared(tenant_id, agent_id) if self._sharing else None
        owned = await self._store.get(ref.owner_tenant_id, agent_id) if ref else None
        if ref is None or owned is None:
            raise AgentNotFound(agent_id)
        if ref.disabled:
            raise SharedAgentDisabled(f"shared agent {agent_id!r} is disabled for your tenant")
        return FoundAgent(definition=owned.definition, owner_tenant_id=ref.owner_tenant_id)

    async def definition(self, tenant_id: str, agent_id: str) -> AgentDefinition:
        """The stored definition of a built-in or of the tenant's agent."""
        return (await self.find(tenant_id, agent_id)).definition

    async def resolve(
        self,
        tenant_id: str,
        agent_id: str,
        knowledge_base_ids: list[str] | None = None,
        key_knowledge_base_ids: list[str] | None = None,
        overrides: TurnOverrides = TurnOverrides(),
    ) -> AgentConfig:
        """The runtime config of ``agent_id`` for this tenant, request and caller."""
        found = await self.find(tenant_id, agent_id)
        agent, owner = found.definition, found.owner_tenant_id
        if owner is not None:
            _check_shared_request(knowledge_base_ids, key_knowledge_base_ids)
            overrides = replace(overrides, summary_model_id=None)  # SPEC A-10: owner's model
        scope = knowledge_scope(agent, knowledge_base_ids, key_knowledge_base_ids)
        try:
            config = runtime_config(
                agent_id, agent, default_model=self._default_model, knowledge_base_ids=scope,
                overrides=overrides, models=self._models,
            )  # fmt: skip
        except (ValidationError, UnknownTool) as exc:
            raise InvalidAgent(f"agent {agent_id!r} has an invalid configuration: {exc}") from exc
        if not await self._wiki_writable(owner or tenant_id, config, shared=owner is not None):
            config = without_wiki_writes(config)
        kbs, tools = await self._knowledge_bases(owner or tenant_id, config)
        if tools != config.allowed_tools:
            always_ask = [t for t in config.approval.always_ask if t in tools]
            config = config.model_copy(
                update={"allowed_tools": tools,
                        "approval": config.approval.model_copy(update={"always_ask": always_ask})}
            )  # fmt: skip
        skills = await self.usable_skills(owner or tenant_id, agent_id, agent, config)
        return config.model_copy(
            update={
                "skills": skills,
                "mcp_servers": await self.mcp_servers(owner or tenant_id, agent, owner is not None),
                "mcp_auth_wait_s": agent.mcp_auth_wait_timeout
                if agent.mcp_auth_wait_timeout > 0
                else DEFAULT_AUTH_WAIT_S,
                "knowledge_bases": kbs,
                "retrieval_tenant_id": owner,
                "shared": owner is not None,
                "key_knowledge_base_ids": key_knowledge_base_ids,
            }
        )

    async def usable_skills(
        self, tenant_id: str, agent_id: str, agent: AgentDefinition, config: AgentConfig
    ) -> list[SkillInfo]:
        """SPEC S-04: the installed skills of the tenant whose sandbox runs them (a shared
        agent's owner) that the agent selects; none without a sandbox, without read_file
        (level 2 needs it) or in skill-install mode."""
        if (
            self._skills is None
            or not agent.sandbox_enabled
            or "read_file" not in config.allowed_tools
            or agent.skills_selection_mode == "none"
            or agent_id == SKILL_INSTALLER
        ):
            return []
        names = agent.selected_skills if agent.skills_selection_mode == "selected" else None
        found = await self._skills.list(tenant_id, names)
        return [SkillInfo(name=s.name, description=s.description) for s in found][
            :MAX_LISTED_SKILLS
        ]

    async def mcp_servers(
        self, tenant_id: str, agent: AgentDefinition, shared: bool
    ) -> list[McpServerRef]:
        """SPEC T-19: the enabled MCP servers of ``tenant_id`` (a shared agent's owner)
        the agent selects; a shared agent only those it names (``all`` counts as none)."""
        mode = agent.mcp_selection_mode
        if self._mcp is None or mode == "none" or (shared and mode == "all"):
            return []
        if mode == "all":
            rows = await self._mcp.list_servers(tenant_id, enabled_only=True)
        else:
            found = {r.id: r for r in await self._mcp.by_ids(agent.mcp_services)}
            rows = [found[sid] for sid in dict.fromkeys(agent.mcp_services) if sid in found]
            rows = [r for r in rows if r.tenant_id == tenant_id and r.enabled]
        return [McpServerRef(id=r.id, name=r.name, description=r.description[:500]) for r in rows]

    async def _wiki_writable(self, tenant_id: str, config: AgentConfig, *, shared: bool) -> bool:
        """SPEC A-08 step 1: a shared or read-only agent, or one with no wiki KB in its
        scope, keeps no wiki write tool (the reference's writable-wiki rule)."""
        if not WIKI_WRITE_TOOLS & set(config.allowed_tools):
            return True
        if shared or config.approval.access_level == "read_only":
            return False
        if self._knowledge is None:
            return True  # knowledge refuses a write to a KB without a wiki anyway
        try:
            kbs = await self._knowledge.scoped(tenant_id, config.knowledge_base_ids)
        except UnknownKnowledgeBase as exc:
            raise InvalidRequest(str(exc)) from None
        return any(KBCapability.WIKI in kb.capabilities for kb in kbs)

    async def _knowledge_bases(
        self, tenant_id: str, config: AgentConfig
    ) -> tuple[list[KnowledgeBaseInfo], list[str]]:
        """The KBs' names when the prompt asks for them, and the turn's tools after the
        capability safety net (SPEC A-08 step 4): a tool whose capability no KB in scope
        offers is dropped, the turn goes on with the others."""
        wants_names = bool(KNOWLEDGE_BASES_PLACEHOLDER.search(config.system_prompt))
        needs_kbs = bool(tool_requirements(config.allowed_tools))
        if self._knowledge is None or not (config.knowledge_base_ids or wants_names or needs_kbs):
            return [], config.allowed_tools
        # An empty scope is every KB of the tenant: what they offer together decides.
        limit = MAX_NAMED_KNOWLEDGE_BASES if not needs_kbs else MAX_SCOPE_KNOWLEDGE_BASES
        try:
            kbs = await self._knowledge.scoped(tenant_id, config.knowledge_base_ids, limit=limit)
        except UnknownKnowledgeBase as exc:
            raise InvalidRequest(str(exc)) from None
        tools = capable_tools(config.allowed_tools, kbs)
        names = [kb.info for kb in kbs[:MAX_NAMED_KNOWLEDGE_BASES]] if wants_names else []
        return names, tools


def _check_shared_request(requested: list[str] | None, key_kbs: list[str] | None) -> None:
    """A shared agent searches its owner's knowledge bases only (SPEC E-26)."""
    if requested:
        raise InvalidRequest(
            "a shared agent searches its owner's knowledge bases; knowledge_base_ids "
            "cannot be given"
        )
    if key_kbs is not None:
        raise KnowledgeScopeDenied(
            "this API key is limited to some of your knowledge bases; a shared agent "
            "searches its owner's knowledge bases"
        )
