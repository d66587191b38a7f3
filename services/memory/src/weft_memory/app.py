"""App factory of memory."""

from __future__ import annotations

from fastapi import FastAPI
from weft_contracts import Topic
from weft_platform.app import create_service_app, init_logging
from weft_platform.runtime import create_runtime
from weft_platform.settings import ServiceSettings

from weft_memory.api import memory_router
from weft_memory.recorder import MessageRecorder

CONSUMER_GROUP = "weft-memory"


class MemorySettings(ServiceSettings):
    """memory settings."""

    service_name: str = "memory"
    http_port: int = 8085


def create_app(settings: MemorySettings | None = None) -> FastAPI:
    """Wire the recorder to ``agent.events`` and the internal API."""
    runtime = create_runtime(settings or MemorySettings())
    init_logging(runtime)
    runtime.bus.consume(
        Topic.AGENT_EVENTS, CONSUMER_GROUP, MessageRecorder(runtime.sessions).handle
    )
    return create_service_app(
        runtime, title="weft memory", routers=[memory_router(runtime.sessions)]
    )
