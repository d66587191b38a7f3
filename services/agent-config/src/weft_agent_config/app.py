"""App factory of agent-config."""

from __future__ import annotations

from fastapi import APIRouter, FastAPI, HTTPException
from pydantic import BaseModel, Field
from weft_contracts import AgentConfig
from weft_platform.app import create_service_app, init_logging
from weft_platform.runtime import create_runtime
from weft_platform.settings import ServiceSettings

from weft_agent_config.resolver import AgentNotFound, AgentResolver, InvalidAgent


class AgentConfigSettings(ServiceSettings):
    """agent-config settings."""

    service_name: str = "agent-config"
    http_port: int = 8081
    llm_model: str = Field(default="weft-scripted", description="Default model (WEFT_LLM_MODEL).")


class ResolveRequest(BaseModel):
    """Which agent, for whom, with which request-level overrides."""

    tenant_id: str = Field(min_length=1)
    agent_id: str = Field(min_length=1)
    knowledge_base_ids: list[str] | None = None


def resolve_router(resolver: AgentResolver) -> APIRouter:
    """``POST /internal/resolve``."""
    router = APIRouter(prefix="/internal", tags=["internal"])

    @router.post("/resolve", response_model=AgentConfig)
    async def resolve(body: ResolveRequest) -> AgentConfig:
        try:
            return await resolver.resolve(body.tenant_id, body.agent_id, body.knowledge_base_ids)
        except AgentNotFound:
            raise HTTPException(404, f"agent {body.agent_id!r} not found") from None
        except InvalidAgent as exc:
            raise HTTPException(422, str(exc)) from None

    return router


def create_app(settings: AgentConfigSettings | None = None) -> FastAPI:
    """Wire the resolver API."""
    s = settings or AgentConfigSettings()
    runtime = create_runtime(s)
    init_logging(runtime)
    resolver = AgentResolver(runtime.sessions, s.llm_model)
    return create_service_app(
        runtime, title="weft agent-config", routers=[resolve_router(resolver)]
    )
