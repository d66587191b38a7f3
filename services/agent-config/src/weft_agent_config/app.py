"""App factory of agent-config: the internal resolve route and the agents CRUD the gateway
proxies as ``/api/v1/agents`` (SPEC A-09). The gateway passes the caller's tenant and user
as query parameters; agent-config is never exposed publicly."""

# No ``from __future__ import annotations``: FastAPI must see the route annotations
# (local aliases such as ``Who``) as objects, not strings.

from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, FastAPI, HTTPException, Query, Request, Response
from pydantic import BaseModel, Field
from weft_contracts import AgentConfig, ReasoningEffort
from weft_platform.app import create_service_app, init_logging
from weft_platform.internal_auth import (
    InternalAuth,
    SystemRoute,
    caller_knowledge_bases,
    narrowest,
)
from weft_platform.runtime import create_runtime
from weft_platform.settings import ServiceSettings
from weft_storage.agent_config.skills import SkillStore
from weft_storage.owner_purge import owner_purge_router

from weft_agent_config.agent_service import AgentService
from weft_agent_config.catalogs import BuiltinAgents, TypePresets
from weft_agent_config.definition import (
    AgentDefinition,
    display_name,
)
from weft_agent_config.knowledge_client import KnowledgeService
from weft_agent_config.knowledge_guard import (
    IncompatibleKnowledgeBase,
    KnowledgeDirectory,
)
from weft_agent_config.mcp.api import servers_router
from weft_agent_config.mcp.internal import SYSTEM_ROUTES as MCP_SYSTEM_ROUTES
from weft_agent_config.mcp.internal import internal_router as mcp_internal_router
from weft_agent_config.mcp.settings import McpSettings
from weft_agent_config.mcp.wiring import mcp_service
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
from weft_agent_config.skills_api import skills_router
from weft_agent_config.store import AgentStore, StoredAgent
from weft_agent_config.suggestion_settings import PATH as SUGGESTION_SETTINGS
from weft_agent_config.suggestion_settings import ROUTE as SUGGESTION_SETTINGS_ROUTE
from weft_agent_config.suggestion_settings import (
    KnowledgeTitles,
    suggestion_settings_router,
)
from weft_agent_config.tool_policy import (
    catalog_json,
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


class AgentConfigSettings(ServiceSettings, McpSettings):
    """agent-config settings."""

    service_name: str = "agent-config"
    http_port: int = 8081
    knowledge_url: str = Field(
        default="http://127.0.0.1:8088",
        description="knowledge (WEFT_KNOWLEDGE_URL): the KB guard and suggestion titles.",
    )
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
    async def resolve(request: Request, body: ResolveRequest) -> AgentConfig:
        # The key's restriction comes from the credential: a body that leaves it out (or
        # names more) never widens a restricted key to every KB of the tenant.
        key_kbs = narrowest(body.key_knowledge_base_ids, caller_knowledge_bases(request))
        overrides = TurnOverrides(
            reasoning_effort=body.reasoning_effort, summary_model_id=body.summary_model_id
        )
        try:
            return await resolver.resolve(
                body.tenant_id,
                body.agent_id,
                body.knowledge_base_ids,
                key_kbs,
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
    async def create(
        request: Request, tenant_id: Tenant, body: dict[str, Any], user_id: User = ""
    ) -> dict[str, Any]:
        agent = svc.validate(body, apply_preset=True)
        _within_key(request, agent)
        await svc.check_knowledge(tenant_id, agent)
        await svc.check_mcp(tenant_id, agent)
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
        request: Request, tenant_id: Tenant, agent_id: str, body: dict[str, Any], user_id: User = ""
    ) -> dict[str, Any]:
        svc.refuse_builtin(agent_id)
        if shares:
            await shares.refuse_shared(tenant_id, agent_id)
        agent = svc.validate(body, apply_preset=False)
        _within_key(request, agent)
        await svc.check_knowledge(tenant_id, agent)
        await svc.check_mcp(tenant_id, agent)
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


def _within_key(request: Request, agent: AgentDefinition) -> None:
    """A KB-restricted key (its credential's ``kbs``) may name only its own KBs in an
    agent it writes: another is the 404 of a missing one, as the gateway answers."""
    allowed = caller_knowledge_bases(request)
    if allowed is None:
        return
    for kb_id in agent.knowledge_base_ids or []:
        if kb_id not in allowed:
            raise HTTPException(404, f"knowledge base {kb_id!r} not found")


async def _existing(svc: AgentService, tenant_id: str, agent_id: str) -> StoredAgent:
    stored = await svc.store.get(tenant_id, agent_id)
    if stored is None:
        raise HTTPException(404, f"agent {agent_id!r} not found")
    return stored


ISSUER = "agent-config"
"""The issuer of agent-config's own service credentials (its questions to knowledge)."""

_ORGANISATIONS = SystemRoute("agent-config:organisations", frozenset({"operator"}))
SYSTEM_ROUTES = {
    "/internal/organisations": _ORGANISATIONS,
    "/internal/organisations/{org_id}/members/{member_tenant}": _ORGANISATIONS,
    SUGGESTION_SETTINGS: SUGGESTION_SETTINGS_ROUTE,
    **MCP_SYSTEM_ROUTES,
}
"""Organisations span tenants: operators only, with a service credential. Every other
internal route acts for the tenant of a request credential."""


def create_app(settings: AgentConfigSettings | None = None) -> FastAPI:
    """Wire the resolver and CRUD APIs."""
    s = settings or AgentConfigSettings()
    runtime = create_runtime(s)
    init_logging(runtime)
    store = AgentStore(runtime.sessions)
    builtins = BuiltinAgents.load()
    signer = runtime.signer(ISSUER)
    knowledge_service = KnowledgeService(
        s.knowledge_url, lambda scopes: signer.service("knowledge", scopes)
    )
    knowledge = KnowledgeDirectory(knowledge_service)
    sharing = SharingStore(runtime.sessions)
    models = ModelCapabilities.load(s.model_capabilities_file or None)
    dev_dir = Path(s.credentials_dir) if s.credentials_dev_keys else None
    mcp = mcp_service(s, runtime.sessions, sharing, dev_keys_dir=dev_dir)
    skills = SkillStore(runtime.sessions)
    resolver = AgentResolver(
        store, builtins, s.llm_model, models=models, knowledge=knowledge, sharing=sharing,
        skills=skills, mcp=mcp.store,
    )  # fmt: skip
    service = AgentService(
        store, builtins, TypePresets.load(), s.llm_model, knowledge, mcp=mcp.store
    )
    shares = SharingService(service, sharing)
    app = create_service_app(
        runtime,
        title="weft agent-config",
        # The sharing routes first: their fixed paths (/internal/agents/shared) must not be
        # taken for an agent id.
        routers=[
            resolve_router(resolver),
            suggestion_settings_router(resolver, KnowledgeTitles(knowledge_service)),
            sharing_router(shares),
            agents_router(service, shares),
            servers_router(mcp),
            mcp_internal_router(mcp),
            skills_router(skills, resolver),
        ],
        internal=InternalAuth(runtime.verifier, "agent-config", SYSTEM_ROUTES),
        on_shutdown=[knowledge_service.aclose],
    )
    app.include_router(owner_purge_router("agent-config", runtime.sessions, runtime.verifier))
    return app
