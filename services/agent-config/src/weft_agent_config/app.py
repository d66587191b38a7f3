"""App factory of agent-config: the internal resolve route and the agents CRUD the gateway
proxies as ``/api/v1/agents`` (SPEC A-09). The gateway passes the caller's tenant and user
as query parameters; agent-config is never exposed publicly."""

# No ``from __future__ import annotations``: FastAPI must see the route annotations
# (local aliases such as ``Who``) as objects, not strings.

from typing import Annotated, Any

from fastapi import APIRouter, FastAPI, HTTPException, Query, Response
from pydantic import BaseModel, Field
from weft_contracts import AgentConfig, ReasoningEffort
from weft_platform.app import create_service_app, init_logging
from weft_platform.runtime import create_runtime
from weft_platform.settings import ServiceSettings

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
from weft_agent_config.model_capabilities import ModelCapabilities
from weft_agent_config.resolver import (
    AgentNotFound,
    AgentResolver,
    AgentUnavailable,
    InvalidAgent,
    InvalidRequest,
    KnowledgeScopeDenied,
    SharedAgentDisabled,
    TurnOverrides,
)
from weft_agent_config.sharing import SharingStore
from weft_agent_config.sharing_api import SharingService, sharing_router
from weft_agent_config.store import AgentStore, StoredAgent
from weft_agent_config.tool_policy import (
    UnknownTool,
    catalog_json,
    normalize_allowed_tools,
    runtime_tools,
)

PLACEHOLDERS = [
    {"name": "{{current_time}}", "description": "Date and time of the request"},
    {"name": "{{language}}", "description": "Language of the user's message"},
    {"name": "{{knowledge_bases}}", "description": "Knowledge bases in scope, with descriptions"},
    {"name": "{{web_search_status}}", "description": "Whether web search is on for this turn"},
    {"name": "{{user_name}}", "description": "Display name of the caller"},
    {"name": "{{agent_name}}", "description": "Name of the agent"},
]
"""Placeholders a system prompt may contain, substituted per request."""


class AgentConfigSettings(ServiceSettings):
    """agent-config settings."""

    service_name: str = "agent-config"
    http_port: int = 8081
    llm_model: str = Field(default="weft-scripted", description="Default model (WEFT_LLM_MODEL).")
    model_capabilities_file: str = Field(
        default="",
        description="YAML table of models' reasoning levels (WEFT_MODEL_CAPABILITIES_FILE); "
        "empty = the shipped model_capabilities.yaml.",
    )


class ResolveRequest(BaseModel):
    """Which agent, for whom, with which request-level overrides."""

    tenant_id: str = Field(min_length=1)
    agent_id: str = Field(min_length=1)
    knowledge_base_ids: list[str] | None = None
    key_knowledge_base_ids: list[str] | None = Field(
        default=None, description="The caller's API key KB restriction (A-09); None = any."
    )
    reasoning_effort: ReasoningEffort | None = Field(
        default=None, description="Request-level override (A-05)."
    )
    summary_model_id: str | None = Field(
        default=None, max_length=200, description="Answering model; ignored for shared agents."
    )


def resolve_router(resolver: AgentResolver) -> APIRouter:
    """``POST /internal/resolve``."""
    router = APIRouter(prefix="/internal", tags=["internal"])

    @router.post("/resolve", response_model=AgentConfig)
    async def resolve(body: ResolveRequest) -> AgentConfig:
        overrides = TurnOverrides(
            reasoning_effort=body.reasoning_effort, summary_model_id=body.summary_model_id
        )
        try:
            return await resolver.resolve(
                body.tenant_id,
                body.agent_id,
                body.knowledge_base_ids,
                body.key_knowledge_base_ids,
                overrides,
            )
        except AgentNotFound:
            raise HTTPException(404, f"agent {body.agent_id!r} not found") from None
        except (KnowledgeScopeDenied, SharedAgentDisabled) as exc:
            raise HTTPException(403, str(exc)) from None
        except (IncompatibleKnowledgeBase, InvalidRequest) as exc:
            raise HTTPException(400, str(exc)) from None
        except (InvalidAgent, AgentUnavailable) as exc:
            raise HTTPException(422, str(exc)) from None
        except ValueError as exc:  # a stored row that no longer validates
            detail = f"agent {body.agent_id!r} has an invalid stored configuration: {exc}"
            raise HTTPException(422, detail[:2000]) from None

    return router


class AgentService:
    """The CRUD rules: validation, presets, built-ins read-only, tenant scoping."""

    def __init__(
        self,
        store: AgentStore,
        builtins: BuiltinAgents,
        presets: TypePresets,
        model: str,
        knowledge: KnowledgeDirectory | None = None,
    ):
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


def agents_router(svc: AgentService, shares: SharingService | None = None) -> APIRouter:
    """``/internal/agents...``: CRUD, copy, catalog, presets, placeholders."""
    router = APIRouter(prefix="/internal/agents", tags=["agents"])
    Tenant = Annotated[str, Query(min_length=1, max_length=128)]
    User = Annotated[str, Query(max_length=128)]

    @router.get("/tools")
    async def tools() -> list[dict[str, Any]]:
        return catalog_json()

    @router.get("/presets")
    async def presets() -> list[dict[str, Any]]:
        return list(svc.presets.presets.values())

    @router.get("/placeholders")
    async def placeholders() -> list[dict[str, str]]:
        return PLACEHOLDERS

    @router.get("")
    async def list_agents(tenant_id: Tenant, user_id: User = "") -> list[dict[str, Any]]:
        listed = [svc.view_builtin(k, v) for k, v in svc.builtins.listed().items()]
        own = [svc.view(a) for a in await svc.store.list(tenant_id)]
        shared = await shares.list_shared(tenant_id, include_disabled=False) if shares else []
        return listed + own + shared

    @router.post("", status_code=201)
    async def create(tenant_id: Tenant, body: dict[str, Any], user_id: User = "") -> dict[str, Any]:
        agent = svc.validate(body, apply_preset=True)
        await svc.check_knowledge(tenant_id, agent)
        return svc.view(await svc.store.create(tenant_id, user_id, agent))

    @router.get("/{agent_id}")
    async def get(tenant_id: Tenant, agent_id: str, user_id: User = "") -> dict[str, Any]:
        if agent_id in svc.builtins.agents:
            return svc.view_builtin(agent_id, svc.builtins.agents[agent_id])
        stored = await svc.store.get(tenant_id, agent_id)
        if stored is not None:
            return svc.view(stored)
        shared = await shares.shared_view(tenant_id, agent_id) if shares else None
        if shared is None:
            raise HTTPException(404, f"agent {agent_id!r} not found")
        return shared

    @router.put("/{agent_id}")
    async def replace(
        tenant_id: Tenant, agent_id: str, body: dict[str, Any], user_id: User = ""
    ) -> dict[str, Any]:
        svc.refuse_builtin(agent_id)
        if shares:
            await shares.refuse_shared(tenant_id, agent_id)
        agent = svc.validate(body, apply_preset=False)
        await svc.check_knowledge(tenant_id, agent)
        if shares:
            await shares.keep_shareable(tenant_id, agent_id, agent)
        stored = await svc.store.replace(tenant_id, agent_id, agent)
        if stored is None:
            raise HTTPException(404, f"agent {agent_id!r} not found")
        return svc.view(stored)

    @router.delete("/{agent_id}", status_code=204)
    async def delete(tenant_id: Tenant, agent_id: str, user_id: User = "") -> Response:
        svc.refuse_builtin(agent_id)
        if shares:
            await shares.refuse_shared(tenant_id, agent_id)
        if not await svc.store.delete(tenant_id, agent_id):
            raise HTTPException(404, f"agent {agent_id!r} not found")
        return Response(status_code=204)

    @router.post("/{agent_id}/copy", status_code=201)
    async def copy(tenant_id: Tenant, agent_id: str, user_id: User = "") -> dict[str, Any]:
        source = svc.builtins.agents.get(agent_id)
        if source is None and shares:
            await shares.refuse_shared(tenant_id, agent_id)  # a copy would reveal the prompt
        if source is None:
            source = (await _existing(svc, tenant_id, agent_id)).definition
        name = f"{display_name(source.name)} (copy)"
        clone = source.model_copy(update={"name": name, "hidden": False})
        return svc.view(await svc.store.create(tenant_id, user_id, clone))

    return router


async def _existing(svc: AgentService, tenant_id: str, agent_id: str) -> StoredAgent:
    stored = await svc.store.get(tenant_id, agent_id)
    if stored is None:
        raise HTTPException(404, f"agent {agent_id!r} not found")
    return stored


def create_app(settings: AgentConfigSettings | None = None) -> FastAPI:
    """Wire the resolver and CRUD APIs."""
    s = settings or AgentConfigSettings()
    runtime = create_runtime(s)
    init_logging(runtime)
    store = AgentStore(runtime.sessions)
    builtins = BuiltinAgents.load()
    knowledge = KnowledgeDirectory(runtime.sessions)
    sharing = SharingStore(runtime.sessions)
    models = ModelCapabilities.load(s.model_capabilities_file or None)
    resolver = AgentResolver(
        store, builtins, s.llm_model, models=models, knowledge=knowledge, sharing=sharing
    )
    service = AgentService(store, builtins, TypePresets.load(), s.llm_model, knowledge)
    shares = SharingService(service, sharing)
    return create_service_app(
        runtime,
        title="weft agent-config",
        # The sharing routes first: their fixed paths (/internal/agents/shared) must not be
        # taken for an agent id.
        routers=[resolve_router(resolver), sharing_router(shares), agents_router(service, shares)],
    )
