"""App factory of memory."""

from __future__ import annotations

from fastapi import FastAPI
from pydantic import AliasChoices, Field
from weft_contracts import Topic
from weft_llm import OpenAIChatModel
from weft_platform.app import create_service_app, init_logging
from weft_platform.runtime import create_runtime
from weft_platform.settings import ServiceSettings

from weft_memory.api import session_router
from weft_memory.extraction import MemoryExtractor
from weft_memory.history_api import history_router
from weft_memory.longterm import LongTermMemory
from weft_memory.memory_api import memory_router
from weft_memory.recorder import MessageRecorder

CONSUMER_GROUP = "weft-memory"


class MemorySettings(ServiceSettings):
    """memory settings; the extraction model uses the ``openai`` package's variable names."""

    service_name: str = "memory"
    http_port: int = 8085
    openai_base_url: str = Field(
        default="http://127.0.0.1:8090/v1",
        validation_alias=AliasChoices("OPENAI_BASE_URL", "WEFT_OPENAI_BASE_URL"),
    )
    openai_api_key: str = Field(
        default="scripted-llm-test-double",
        validation_alias=AliasChoices("OPENAI_API_KEY", "WEFT_OPENAI_API_KEY"),
    )
    llm_model: str = Field(
        default="weft-scripted", validation_alias=AliasChoices("WEFT_LLM_MODEL", "LLM_MODEL")
    )
    extraction_stall_timeout_s: float = Field(default=60.0, gt=0)


def create_app(settings: MemorySettings | None = None) -> FastAPI:
    """Wire the recorder to ``agent.events`` and the internal API."""
    settings = settings or MemorySettings()
    runtime = create_runtime(settings)
    init_logging(runtime)
    runtime.bus.consume(
        Topic.AGENT_EVENTS,
        CONSUMER_GROUP,
        MessageRecorder(runtime.sessions, runtime.redis).handle,
    )
    memory = LongTermMemory(runtime.sessions)
    model = OpenAIChatModel(base_url=settings.openai_base_url, api_key=settings.openai_api_key)
    extractor = MemoryExtractor(
        runtime.sessions,
        model,
        settings.llm_model,
        memory,
        stall_timeout_s=settings.extraction_stall_timeout_s,
    )
    routers = [
        session_router(runtime.sessions),
        history_router(runtime.sessions),
        memory_router(runtime.sessions, memory, extractor),
    ]
    return create_service_app(runtime, title="weft memory", routers=routers)
