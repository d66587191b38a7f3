"""App factory of memory."""

from __future__ import annotations

from fastapi import FastAPI
from pydantic import Field
from weft_contracts import Topic
from weft_llm import OpenAIChatModel
from weft_platform.app import create_service_app, init_logging
from weft_platform.internal_auth import InternalAuth, SystemRoute
from weft_platform.runtime import create_runtime
from weft_platform.settings import ModelClientSettings

from weft_memory.api import session_router
from weft_memory.extraction import MemoryExtractor
from weft_memory.extraction_queue import ExtractionQueue
from weft_memory.extraction_worker import ExtractionWorker, WorkerSettings
from weft_memory.fork_api import fork_router
from weft_memory.history_api import history_router
from weft_memory.longterm import LongTermMemory
from weft_memory.memory_api import memory_router
from weft_memory.recorder import RECORDED_TYPES, MessageRecorder
from weft_memory.turns_api import turns_router
from weft_memory.usage_api import USAGE_ROUTE, USAGE_SCOPE, usage_router

CONSUMER_GROUP = "weft-memory"


class MemorySettings(ModelClientSettings):
    """memory settings; the extraction model uses the ``openai`` package's variable names."""

    service_name: str = "memory"
    http_port: int = 8085
    extraction_stall_timeout_s: float = Field(default=60.0, gt=0)
    extraction_concurrency: int = Field(default=2, ge=1, le=32, description="SPEC M-10 workers.")
    extraction_poll_s: float = Field(default=5.0, gt=0)
    extraction_attempts: int = Field(default=3, ge=1, le=10)
    extraction_retry_backoff_s: float = Field(default=10.0, ge=0)
    extraction_stale_after_s: float = Field(default=300.0, gt=0)
    events_linger_ms: int = Field(
        default=200,
        ge=0,
        le=5000,
        description="Fetches of agent events are held this long until 64 KiB are there "
        "(0: answered at once): memory may lag, since a history request waits for the "
        "turn it needs (history_wait_s); the broker and memory pay per fetch, not per event.",
    )
    history_wait_s: float = Field(
        default=5.0,
        ge=0,
        le=9,
        description="How long a history request waits for the end of the session's "
        "previous turn to be recorded (below the engine's 10 s memory timeout).",
    )


SYSTEM_ROUTES = {
    "/internal/turns/unfinished": SystemRoute(
        "memory:turns.read", frozenset({"engine", "operator"})
    ),
    USAGE_ROUTE: USAGE_SCOPE,
}
"""Routes across tenants: the engine's turn auditor (and operators) with a service
credential; every other internal route acts for the tenant of a request credential."""


def create_app(settings: MemorySettings | None = None) -> FastAPI:
    """Wire the recorder to ``agent.events`` and the internal API."""
    settings = settings or MemorySettings()
    runtime = create_runtime(settings)
    init_logging(runtime)
    memory = LongTermMemory(runtime.sessions)
    model = OpenAIChatModel(base_url=settings.openai_base_url, api_key=settings.openai_api_key)
    extractor = MemoryExtractor(
        runtime.sessions,
        model,
        settings.llm_model,
        memory,
        stall_timeout_s=settings.extraction_stall_timeout_s,
    )
    queue = ExtractionQueue(runtime.sessions, stale_after_s=settings.extraction_stale_after_s)
    worker = ExtractionWorker(
        queue,
        extractor,
        WorkerSettings(
            concurrency=settings.extraction_concurrency,
            poll_s=settings.extraction_poll_s,
            max_attempts=settings.extraction_attempts,
            retry_backoff_s=settings.extraction_retry_backoff_s,
        ),
    )
    recorder = MessageRecorder(runtime.sessions, runtime.redis, on_extraction_due=worker.wake)
    runtime.bus.consume(
        Topic.AGENT_EVENTS,
        CONSUMER_GROUP,
        recorder.handle,
        types=RECORDED_TYPES,
        linger_ms=settings.events_linger_ms,
    )
    routers = [
        session_router(runtime.sessions),
        fork_router(runtime.sessions),
        history_router(runtime.sessions, runtime.redis, settings.history_wait_s),
        memory_router(runtime.sessions, memory, extractor, queue),
        turns_router(runtime.sessions),
        usage_router(runtime.sessions),
    ]
    return create_service_app(
        runtime,
        title="weft memory",
        routers=routers,
        internal=InternalAuth(runtime.verifier, "memory", SYSTEM_ROUTES),
        on_startup=[worker.start],
        on_shutdown=[worker.stop, model.aclose],
    )
