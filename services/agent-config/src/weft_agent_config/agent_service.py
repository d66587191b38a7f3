"""The agents CRUD rules of agent-config, shared by the CRUD routes (``app``) and the sharing
routes (``sharing_api``): validation, type presets, built-ins read-only, tenant scoping."""

from __future__ import annotations

from typing import Any

from fastapi import HTTPException

from weft_agent_config.catalogs import BuiltinAgents, TypePresets
from weft_agent_config.definition import (
    AgentDefinition,
    display_name,
    ensure_defaults,
    normalize_max_iterations,
)
from weft_agent_config.knowledge_guard import (
    IncompatibleKnowledgeBase,
    KnowledgeDirectory,
    UnknownKnowledgeBase,
    check_compatible,
)
from weft_agent_config.mcp.store import McpStore
from weft_agent_config.store import AgentStore, StoredAgent
from weft_agent_config.tool_policy import UnknownTool, normalize_allowed_tools, runtime_tools


class AgentService:
    """The CRUD rules: validation, presets, built-ins read-only, tenant scoping."""

    def __init__(
        self,
        store: AgentStore,
        builtins: BuiltinAgents,
        presets: TypePresets,
        model: str,
        knowledge: KnowledgeDirectory | None = None,
        *,
        mcp: McpStore | None = None,
    ):
        self.mcp = mcp
        self.store = store
        self.builtins = builtins
        self.presets = presets
        self.model = model
        self.knowledge = knowledge

    async def check_knowledge(self, tenant_id: str, agent: AgentDefinition) -> None:
        """SPEC A-07 backend guard on save: the selected KBs must be the tenant's (400)
        and able to serve the agent's tools (400 naming the KB and the capability)."""
        if self.knowledge is None or agent.kb_selection_mode != "selected":
            return
        if not agent.knowledge_base_ids:
            return
        tools = runtime_tools(
            agent.allowed_tools, has_kb_scope=True, web_search=False, memory=False
        )
        try:
            kbs = await self.knowledge.scoped(tenant_id, agent.knowledge_base_ids)
            check_compatible(tools, kbs)
        except (UnknownKnowledgeBase, IncompatibleKnowledgeBase) as exc:
            raise HTTPException(400, str(exc)) from None

    async def check_mcp(self, tenant_id: str, agent: AgentDefinition) -> None:
        """SPEC T-19 guard on save: the MCP servers an agent names are the tenant's (400;
        another tenant's server reads as unknown, never as someone else's)."""
        if self.mcp is None or agent.mcp_selection_mode != "selected":
            return
        for server_id in agent.mcp_services:
            if await self.mcp.get(tenant_id, server_id) is None:
                raise HTTPException(400, f"MCP server {server_id!r} not found")

    def validate(self, body: dict[str, Any], *, apply_preset: bool) -> AgentDefinition:
        """Parse and normalise a definition; 422 for bad fields, 400 for unknown tools."""
        try:
            agent = AgentDefinition.model_validate(body)
        except ValueError as exc:
            raise HTTPException(422, _errors(exc)) from None
        if agent.hidden:
            raise HTTPException(422, "hidden is reserved for built-in agents")
        if isinstance(agent.name, str) and not agent.name.strip():
            raise HTTPException(422, "name must not be empty")
        if apply_preset:
            agent = self.presets.prefill(agent)
        else:
            agent_type = self.presets.normalize_type(agent.agent_type)
            agent = agent.model_copy(update={"agent_type": agent_type})
        updates: dict[str, Any] = {}
        if agent.max_iterations is not None:
            updates["max_iterations"] = normalize_max_iterations(agent.max_iterations)
        if agent.allowed_tools is not None:
            try:
                updates["allowed_tools"] = normalize_allowed_tools(agent.allowed_tools)
            except UnknownTool as exc:
                raise HTTPException(400, str(exc)) from None
        return agent.model_copy(update=updates)

    def view_builtin(self, agent_id: str, agent: AgentDefinition) -> dict[str, Any]:
        """A built-in agent as the API shows it, with whether it can run here."""
        view = _view(agent_id, agent, self.model, builtin=True)
        reason = self.builtins.unavailable.get(agent_id)
        view.update(available=reason is None, unavailable_reason=reason)
        return view

    def view(self, stored: StoredAgent) -> dict[str, Any]:
        """A custom agent as the API shows it (defaults applied, A-04)."""
        view = _view(stored.id, stored.definition, self.model, builtin=False)
        view.update(
            available=True,
            unavailable_reason=None,
            created_by=stored.created_by,
            created_at=stored.created_at.isoformat() if stored.created_at else None,
            updated_at=stored.updated_at.isoformat() if stored.updated_at else None,
        )
        return view

    def refuse_builtin(self, agent_id: str) -> None:
        """Built-in and reserved ids are read-only for every tenant."""
        if self.builtins.is_builtin_id(agent_id):
            raise HTTPException(403, f"agent {agent_id!r} is built in and read-only")


def _view(agent_id: str, agent: AgentDefinition, model: str, *, builtin: bool) -> dict[str, Any]:
    full = ensure_defaults(agent, model).model_dump(mode="json")
    full.update(
        id=agent_id,
        builtin=builtin,
        name=display_name(agent.name),
        names=agent.name if isinstance(agent.name, dict) else {"default": agent.name},
        description=display_name(agent.description),
    )
    return full


def _errors(exc: ValueError) -> Any:
    errors = getattr(exc, "errors", None)
    if callable(errors):
        return [{"loc": e["loc"], "msg": e["msg"], "type": e["type"]} for e in errors()]
    return str(exc)
