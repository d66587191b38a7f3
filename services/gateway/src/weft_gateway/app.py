"""App factory of the gateway."""

from __future__ import annotations

from fastapi import FastAPI
from weft_contracts import Topic
from weft_platform.app import create_service_app, init_logging
from weft_platform.runtime import create_runtime
from weft_storage.knowledge import KnowledgeStore

from weft_gateway.api import Gateway, public_router
from weft_gateway.auth import ApiKeyAuth
from weft_gateway.clients import AgentConfigClient, MemoryClient
from weft_gateway.knowledge_api import knowledge_router
from weft_gateway.projector import StreamProjector
from weft_gateway.settings import GatewaySettings
from weft_gateway.streams import SessionStreams

PROJECTOR_GROUP = "weft-gateway-projector"


def create_app(settings: GatewaySettings | None = None) -> FastAPI:
    """Wire the public API and the projector."""
    s = settings or GatewaySettings()
    runtime = create_runtime(s)
    init_logging(runtime)
    streams = SessionStreams(
        runtime.redis, max_len=s.stream_max_len, retention_s=s.stream_retention_s
    )
    memory = MemoryClient(s.memory_url, "memory")
    agents = AgentConfigClient(s.agent_config_url, "agent-config")
    auth = ApiKeyAuth(runtime.sessions)
    gateway = Gateway(
        settings=s,
        bus=runtime.bus,
        streams=streams,
        memory=memory,
        agents=agents,
    )
    # The projector does its own exact de-duplication by (turn, seq).
    runtime.bus.consume(
        Topic.AGENT_EVENTS, PROJECTOR_GROUP, StreamProjector(streams).handle, dedupe=False
    )

    async def register_dev_key() -> None:
        if s.dev_api_key:
            await auth.register(s.dev_tenant, s.dev_user, s.dev_api_key, name="dev bootstrap key")

    return create_service_app(
        runtime,
        title="Weft gateway",
        routers=[
            public_router(gateway, auth),
            knowledge_router(KnowledgeStore(runtime.sessions), auth),
        ],
        on_startup=[register_dev_key],
        on_shutdown=[memory.aclose, agents.aclose],
    )
