"""App factory of the suggestions service: follow-up questions after each answer
(SPEC Q-01..Q-05), generated off the consume path of ``agent.events`` and announced on
``weft.session.notices.v1``."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from fastapi import FastAPI
from pydantic import Field
from weft_contracts import Topic
from weft_llm import MeteredModel, OpenAIChatModel
from weft_platform.app import create_service_app, init_logging
from weft_platform.credentials import RECORDS
from weft_platform.internal_auth import InternalAuth
from weft_platform.metrics import LLM_METER
from weft_platform.record_credentials import record_scope
from weft_platform.runtime import create_runtime
from weft_platform.session_owner import SessionOwners
from weft_platform.settings import ModelClientSettings
from weft_storage.owner_purge import owner_purge_router

from weft_suggestions.agent_settings import SCOPE as SETTINGS_SCOPE
from weft_suggestions.agent_settings import AgentSettingsClient
from weft_suggestions.api import starters_router, suggestions_router
from weft_suggestions.config import AgentSettings, FixedConfigs, FollowUpConfig
from weft_suggestions.generation import FollowUpGenerator
from weft_suggestions.lease import SuggestionLease
from weft_suggestions.retention import TurnRetention
from weft_suggestions.starters import StarterSets
from weft_suggestions.turns import TurnLog
from weft_suggestions.worker import SuggestionWorker

CONSUMER_GROUP = "weft-suggestions"
ISSUER = "suggestions"
"""The issuer of this service's own credentials (agent-config settings, regenerated sets)."""

TURN_TYPES = frozenset({"turn_started", "references", "complete"})
"""The events suggestions needs: the question, the sources, the end of the turn. Every
other record of ``agent.events`` (deltas, tool events: nearly all of them) is skipped by
its ``type`` header without being decoded."""


class SuggestionsSettings(ModelClientSettings):
    """suggestions settings; the model uses the ``openai`` package's variable names."""

    service_name: str = "suggestions"
    http_port: int = 8086
    agent_config_url: str = "http://127.0.0.1:8081"
    memory_url: str = Field(
        default="http://127.0.0.1:8085",
        description="memory's internal API: whether a session named by a request is the "
        "caller's (memory owns sessions).",
    )
    memory_timeout_s: float = Field(default=5.0, gt=0, le=60)
    suggestions_enabled: bool = Field(
        default=True,
        description="Service-wide switch (WEFT_SUGGESTIONS_ENABLED): false turns every "
        "agent's starters and follow-ups off, whatever its own settings say.",
    )
    follow_ups: FollowUpConfig | None = Field(
        default=None,
        description="Operator override (WEFT_FOLLOW_UPS, JSON of FollowUpConfig): these "
        "follow-up settings for every agent instead of each agent's own (SPEC Q-01/Q-02).",
    )
    settings_ttl_s: float = Field(
        default=30.0,
        ge=0,
        le=3600,
        description="How long an agent's settings read from agent-config are reused.",
    )
    locale: str = Field(default="en", max_length=35, description="Locale of generated sets.")
    lease_s: float = Field(
        default=90.0,
        gt=0,
        description="SPEC Q-04: how long a generator holds a set; above the stall timeout, "
        "so only a crashed or stuck generator loses it.",
    )
    generation_stall_timeout_s: float = Field(default=30.0, gt=0)
    generation_concurrency: int = Field(default=8, ge=1, le=64)
    generation_max_pending: int = Field(
        default=256,
        ge=1,
        le=10_000,
        description="Generations held per process; beyond it a claimed set waits for its "
        "lease to pass and a sweeper (invariant 6).",
    )
    sweep_interval_s: float = Field(default=15.0, gt=0)
    turn_retention_days: int = Field(
        default=30,
        ge=1,
        le=3650,
        description="suggestion_turns older than this are deleted (WEFT_TURN_RETENTION_DAYS).",
    )
    retention_interval_s: float = Field(default=3600.0, gt=0)
    events_linger_ms: int = Field(
        default=200,
        ge=0,
        le=5000,
        description="Fetches of agent events are held this long until 64 KiB are there: "
        "fewer, larger batches; follow-ups may start this much later.",
    )


def create_app(settings: SuggestionsSettings | None = None) -> FastAPI:
    """Wire the turn log, the generator and its sweeper, and the internal API."""
    settings = settings or SuggestionsSettings()
    runtime = create_runtime(settings)
    init_logging(runtime)
    chat = OpenAIChatModel(base_url=settings.openai_base_url, api_key=settings.openai_api_key)
    model = MeteredModel(chat, LLM_METER)
    turns = TurnLog(runtime.sessions)
    signer = runtime.signer(ISSUER)
    configs, closers = agent_settings(
        settings, lambda: signer.service("agent-config", [SETTINGS_SCOPE])
    )
    worker = SuggestionWorker(
        turns=turns,
        lease=SuggestionLease(runtime.sessions, settings.lease_s),
        configs=configs,
        generator=FollowUpGenerator(
            model, settings.llm_model, stall_timeout_s=settings.generation_stall_timeout_s
        ),
        bus=runtime.bus,
        locale=settings.locale,
        concurrency=settings.generation_concurrency,
        sweep_interval_s=settings.sweep_interval_s,
        max_pending=settings.generation_max_pending,
        own_credential=lambda: signer.service(RECORDS, [record_scope(Topic.SESSION_NOTICES)]),
    )
    starters = StarterSets(
        sessions=runtime.sessions,
        lease=SuggestionLease(runtime.sessions, settings.lease_s),
        configs=configs,
        model=model,
        default_model=settings.llm_model,
        locale=settings.locale,
        stall_timeout_s=settings.generation_stall_timeout_s,
    )
    retention = TurnRetention(
        runtime.sessions,
        days=settings.turn_retention_days,
        interval_s=settings.retention_interval_s,
    )
    runtime.bus.consume_batch(
        Topic.AGENT_EVENTS,
        CONSUMER_GROUP,
        worker.on_events,
        types=TURN_TYPES,
        linger_ms=settings.events_linger_ms,
    )
    owners = SessionOwners(settings.memory_url, settings.memory_timeout_s)
    app = create_service_app(
        runtime,
        title="weft suggestions",
        routers=[
            suggestions_router(runtime.sessions, turns, worker, owners),
            starters_router(starters, owners),
        ],
        internal=InternalAuth(runtime.verifier, "suggestions"),
        on_startup=[worker.start, retention.start],
        on_shutdown=[retention.stop, worker.stop, chat.aclose, owners.aclose, *closers],
    )
    app.state.worker = worker
    app.include_router(owner_purge_router("suggestions", runtime.sessions, runtime.verifier))
    return app


def agent_settings(
    settings: SuggestionsSettings, credential: Callable[[], str]
) -> tuple[AgentSettings, list[Callable[[], Awaitable[None]]]]:
    """Each agent's settings from agent-config, unless the operator fixed them for all
    (``WEFT_FOLLOW_UPS``) or switched suggestions off; with what closes them."""
    if not settings.suggestions_enabled:
        return FixedConfigs(FollowUpConfig(enabled=False), starters_enabled=False), []
    if settings.follow_ups is not None:
        return FixedConfigs(settings.follow_ups), []
    client = AgentSettingsClient(
        settings.agent_config_url, credential, ttl_s=settings.settings_ttl_s
    )
    return client, [client.aclose]
