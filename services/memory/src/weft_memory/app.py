"""App factory of memory."""

from __future__ import annotations

from fastapi import FastAPI
from pydantic import Field
from weft_contracts import Topic
from weft_llm import MeteredModel, OpenAIChatModel
from weft_platform.app import create_service_app, init_logging
from weft_platform.body_limit import BodyLimit
from weft_platform.credentials import RECORDS
from weft_platform.internal_auth import InternalAuth, SystemRoute
from weft_platform.metrics import LLM_METER
from weft_platform.record_credentials import record_scope
from weft_platform.runtime import create_runtime
from weft_platform.settings import ModelClientSettings

from weft_memory.api import session_router
from weft_memory.decisions import DecisionDesk
from weft_memory.extraction import MemoryExtractor
from weft_memory.extraction_queue import ExtractionQueue
from weft_memory.extraction_worker import ExtractionWorker, WorkerSettings
from weft_memory.fork_api import fork_router
from weft_memory.grants import GrantLifetimes
from weft_memory.grants_api import grants_router
from weft_memory.history_api import history_router
from weft_memory.longterm import LongTermMemory
from weft_memory.memory_api import memory_router
from weft_memory.prompt_timer import PromptTimer
from weft_memory.prompts_api import prompts_router
from weft_memory.recorder import RECORDED_TYPES, MessageRecorder
from weft_memory.renewal import RENEW_SCOPE, TurnCredentialRenewer
from weft_memory.suspensions_api import (
    MAX_BODY_BYTES,
    SUSPENSION_READ,
    SUSPENSION_ROUTE,
    suspensions_router,
)
from weft_memory.tenant_data_api import tenant_data_router
from weft_memory.turns_api import turns_router
from weft_memory.usage_api import (
    DOCUMENT_USAGE_ROUTE,
    DOCUMENT_USAGE_SCOPE,
    GENERATION_USAGE_ROUTE,
    USAGE_ROUTE,
    USAGE_SCOPE,
    usage_router,
)
from weft_memory.workspaces import SCOPE as WORKSPACE_SCOPE
from weft_memory.workspaces import SandboxWorkspaces

CONSUMER_GROUP = "weft-memory"
ISSUER = "memory"
"""memory's own key (``<credentials_dir>/memory.<kid>.key``): the prompt timer's
service credentials (Kafka records, the gateway's renewal route)."""


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
    gateway_url: str = Field(
        default="http://127.0.0.1:8080",
        description="The gateway's internal API: the prompt timer renews an expired "
        "prompt's turn credential there (POST /internal/turn-credentials/renew).",
    )
    gateway_timeout_s: float = Field(default=5.0, gt=0, le=60)
    sandbox_url: str = Field(
        default="http://127.0.0.1:8084",
        description="The sandbox's internal API: a fork or rollback moves the workspace "
        "with the history there (the sandbox owns the workspace checkpoints).",
    )
    sandbox_timeout_s: float = Field(default=10.0, gt=0, le=60)
    approval_poll_s: float = Field(
        default=1.0,
        gt=0,
        le=4,
        description="How often the prompt timer looks for overdue prompts (SPEC H-02: a "
        "prompt fires within 5 s of its time).",
    )
    decision_wait_s: float = Field(
        default=5.0,
        ge=0,
        le=30,
        description="How long a decision waits for a prompt memory has not recorded yet "
        "before it answers 404.",
    )
    grant_session_ttl_s: float = Field(
        default=24 * 3600, gt=0, description="Life of a 'remember this session' grant."
    )
    grant_agent_ttl_s: float = Field(
        default=30 * 24 * 3600, gt=0, description="Life of a 'remember this agent' grant."
    )
    max_body_bytes: int = Field(
        default=MAX_BODY_BYTES,
        ge=64 * 1024,
        description="Largest request body of the internal API (413 above): a suspended "
        "turn's state is the largest.",
    )


SYSTEM_ROUTES = {
    "/internal/turns/unfinished": SystemRoute(
        "memory:turns.read", frozenset({"engine", "operator"})
    ),
    USAGE_ROUTE: USAGE_SCOPE,
    DOCUMENT_USAGE_ROUTE: DOCUMENT_USAGE_SCOPE,
    GENERATION_USAGE_ROUTE: DOCUMENT_USAGE_SCOPE,
    SUSPENSION_ROUTE: SUSPENSION_READ,
}
"""Routes across tenants: the engine's turn auditor (and operators) with a service
credential; every other internal route acts for the tenant of a request credential."""


def create_app(settings: MemorySettings | None = None) -> FastAPI:
    """Wire the recorder to ``agent.events`` and the internal API."""
    settings = settings or MemorySettings()
    runtime = create_runtime(settings)
    init_logging(runtime)
    memory = LongTermMemory(runtime.sessions)
    chat = OpenAIChatModel(base_url=settings.openai_base_url, api_key=settings.openai_api_key)
    model = MeteredModel(chat, LLM_METER)
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
    recorder = MessageRecorder(
        runtime.sessions, runtime.redis, on_extraction_due=worker.wake,
        deployment=settings.topic_prefix,
    )  # fmt: skip
    runtime.bus.consume(
        Topic.AGENT_EVENTS,
        CONSUMER_GROUP,
        recorder.handle,
        types=RECORDED_TYPES,
        linger_ms=settings.events_linger_ms,
    )
    signer = runtime.signer(ISSUER)

    def own_credential(topic: Topic, scope: str) -> str:
        return signer.service(RECORDS, [record_scope(topic), scope])

    renewer = TurnCredentialRenewer(
        settings.gateway_url,
        lambda: signer.service("gateway", [RENEW_SCOPE]),
        settings.gateway_timeout_s,
    )
    timer = PromptTimer(
        sessions=runtime.sessions, bus=runtime.bus, renewer=renewer,
        own_credential=own_credential, poll_s=settings.approval_poll_s,
        deployment=settings.topic_prefix,
    )  # fmt: skip
    lifetimes = GrantLifetimes(
        session_s=settings.grant_session_ttl_s, agent_s=settings.grant_agent_ttl_s
    )
    desk = DecisionDesk(runtime.sessions, lifetimes, settings.decision_wait_s)
    workspaces = SandboxWorkspaces(
        settings.sandbox_url,
        lambda: signer.service("sandbox", [WORKSPACE_SCOPE]),
        settings.sandbox_timeout_s,
    )
    routers = [
        session_router(runtime.sessions, workspaces),
        fork_router(runtime.sessions, workspaces),
        history_router(runtime.sessions, runtime.redis, settings.history_wait_s),
        memory_router(runtime.sessions, memory, extractor, queue),
        turns_router(runtime.sessions),
        usage_router(runtime.sessions),
        prompts_router(runtime.sessions, desk),
        grants_router(runtime.sessions, lifetimes),
        suspensions_router(runtime.sessions),
    ]
    app = create_service_app(
        runtime,
        title="weft memory",
        routers=routers,
        internal=InternalAuth(runtime.verifier, "memory", SYSTEM_ROUTES),
        on_startup=[worker.start, timer.start],
        on_shutdown=[timer.stop, worker.stop, chat.aclose, renewer.aclose, workspaces.aclose],
    )
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes)
    app.include_router(tenant_data_router(runtime.sessions, runtime.verifier))
    return app
