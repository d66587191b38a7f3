"""App factory of the engine."""

from __future__ import annotations

import asyncio

from fastapi import FastAPI
from weft_contracts import Topic
from weft_llm import MeteredModel, OpenAIChatModel
from weft_platform.app import create_service_app, init_logging
from weft_platform.budgets import TokenBudgets
from weft_platform.credentials import RECORDS, CredentialSigner
from weft_platform.metrics import LLM_METER
from weft_platform.record_credentials import RecordCheck, record_scope
from weft_platform.retry import RetryWindow
from weft_platform.runtime import ServiceRuntime, create_runtime
from weft_platform.tasks import cancel_and_wait

from weft_engine.act import earliest_deadline
from weft_engine.approvals import (
    ApprovalDesk,
    ApprovalGate,
    DecisionCheck,
    SuspendedTurns,
    Suspensions,
)
from weft_engine.auditor import AuditSettings, MemoryTurns, TurnAuditor
from weft_engine.context import ContextManager
from weft_engine.emitter import EventEmitter
from weft_engine.finalize import Finisher
from weft_engine.history_client import HistoryClient
from weft_engine.intake import TurnIntake
from weft_engine.leases import TurnLeases
from weft_engine.loop import TurnLoop
from weft_engine.metering import TurnMeter
from weft_engine.parked_images import ImageResolvingModel, ParkedImages
from weft_engine.reporting import ResultReporter
from weft_engine.requests_replay import RequestsReplay, kafka_requests
from weft_engine.scheduler import StepScheduler, local_share
from weft_engine.sessions import SessionGate, SteerInbox
from weft_engine.settings import EngineSettings
from weft_engine.state import TurnState, TurnStore
from weft_engine.think import ThinkSettings
from weft_engine.token_cache import CachedTokenEstimator
from weft_engine.tracing import TurnTracer, provider_from_settings
from weft_engine.trails import KafkaTurnTrails, TurnTrails
from weft_engine.turn_cap import TurnCap
from weft_engine.vision import ImageDescriber

ENGINE_ISSUER = "engine"
"""Issuer of the engine's service credential (its own key pair)."""
REQUESTS_GROUP = "weft-engine"
RESULTS_GROUP = "weft-engine-results"
CONTROL_GROUP = "weft-engine-control"


def turn_meter(runtime: ServiceRuntime, s: EngineSettings) -> TurnMeter:
    """Budget counters in the runtime's Redis; the limits come with each turn (the
    settings' defaults for a turn without them)."""
    return TurnMeter(TokenBudgets(runtime.redis), s.budget_defaults())


def approval_desk(
    *,
    runtime: ServiceRuntime,
    signer: CredentialSigner,
    store: TurnStore,
    suspensions: Suspensions,
    trails: TurnTrails,
    sessions: SessionGate,
    leases: TurnLeases,
    loop: TurnLoop,
    scheduler: StepScheduler,
) -> tuple[ApprovalDesk, SuspendedTurns]:
    """The desk that applies approval decisions (SPEC H-02, H-03), and what puts back a
    waiting turn Redis lost (the desk and the auditor use it)."""

    async def claim_session(state: TurnState) -> None:
        await sessions.claim(state.tenant_id, state.session_id, state.request_id)

    async def wake_at(state: TurnState) -> None:
        """Calls still out when Redis was lost get their deadline back (E-17)."""
        if any(c.deadline and c.call_id not in state.results for c in state.pending):
            due = earliest_deadline(state)
            if due is not None:
                await leases.set_deadline(state.request_id, due)

    async def after(saved: TurnState) -> None:
        await suspensions.keep(saved)
        if saved.tools_answered():
            await scheduler.submit(saved.request_id, state=saved)

    restorer = SuspendedTurns(
        store=store, suspensions=suspensions, trails=trails, claim_session=claim_session,
        wake_at=wake_at,
        service_credential=lambda: signer.service("memory", ["memory:suspensions.read"]),
    )  # fmt: skip
    desk = ApprovalDesk(
        load=store.load, restore=restorer.restore, apply=loop.tool_round.apply_decision,
        resend=loop.tool_round.resend_approved, after=after,
        check=DecisionCheck(runtime.verifier),
    )  # fmt: skip
    return desk, restorer


def create_app(settings: EngineSettings | None = None) -> FastAPI:
    """Wire the loop, the scheduler and the three consumers."""
    s = settings or EngineSettings()
    runtime = create_runtime(s, database=False)  # the engine opens no database
    init_logging(runtime)
    redis, ttl = runtime.redis, s.turn_state_ttl_s
    llm = OpenAIChatModel(
        base_url=s.openai_base_url, api_key=s.openai_api_key, http_backend=s.llm_http_backend
    )
    images = ParkedImages(redis, ttl)
    model = ImageResolvingModel(MeteredModel(llm, LLM_METER), images)
    store = TurnStore(redis, ttl)
    emitter = EventEmitter(runtime.bus, redis, ttl)
    leases = TurnLeases(
        redis, owner=runtime.instance_id, namespace=s.topic_prefix, ttl_s=s.lease_ttl_s,
        record_ttl_s=ttl,
    )  # fmt: skip
    sessions = SessionGate(redis, ttl, starts_key=f"weft:{s.topic_prefix}engine:starts")
    inbox = SteerInbox(redis, ttl)
    provider = provider_from_settings(s.tracing_exporter, runtime.instance_id, s.tracing_file)
    tracer = TurnTracer(provider, sample_ratio=s.tracing_sample_ratio)
    reporter = ResultReporter(store, emitter, tracer)
    memory = HistoryClient(
        base_url=s.memory_url, retry=RetryWindow(window_s=s.memory_retry_window_s)
    )
    suspensions = Suspensions(memory)  # SPEC H-02: a waiting turn outlives Redis
    context = ContextManager(
        memory=memory, model=model, emitter=emitter, estimator=CachedTokenEstimator()
    )
    cap = TurnCap(
        redis, f"{s.topic_prefix}engine:turns", cap=s.turn_tenant_max_inflight,
        turn_deadline_s=s.turn_deadline_s,
    )  # fmt: skip
    finisher = Finisher(
        emitter=emitter, store=store, leases=leases, sessions=sessions, tracer=tracer, cap=cap
    )
    finisher.persist_scale = context.persist_scale

    audit = AuditSettings(
        interval_s=s.audit_interval_s, grace_s=s.audit_grace_s, lookback_s=s.audit_lookback_s
    )
    trails = KafkaTurnTrails(s, runtime.bus.topic_name(Topic.AGENT_EVENTS), audit.kafka_margin_s)
    loop = TurnLoop(
        bus=runtime.bus, redis=redis, store=store, emitter=emitter, model=model,
        finisher=finisher, reporter=reporter, inbox=inbox, leases=leases, context=context,
        think_settings=ThinkSettings(
            retry_backoff_s=s.llm_retry_backoff_s, coalesce_window_s=s.delta_coalesce_ms / 1000
        ),
        tool_timeout_s=s.tool_deadline_s, tracer=tracer, vision=ImageDescriber(model, emitter),
        trails=trails, meter=turn_meter(runtime, s), gate=ApprovalGate(memory),
        suspensions=suspensions,
    )  # fmt: skip
    scheduler = StepScheduler(
        leases, loop.run_step, max_inflight=s.max_inflight_turns, ttl_s=s.lease_ttl_s,
        tenant_max_local=local_share(s.max_inflight_turns, s.turn_tenant_max_local),
        load=store.load,
    )  # fmt: skip
    signer = runtime.signer(ENGINE_ISSUER)
    desk, restorer = approval_desk(
        runtime=runtime, signer=signer, store=store, suspensions=suspensions, trails=trails,
        sessions=sessions, leases=leases, loop=loop, scheduler=scheduler,
    )  # fmt: skip
    cancel_channel = f"weft:{s.topic_prefix}cancel"
    intake = TurnIntake(
        redis=redis, store=store, emitter=emitter, context=context, sessions=sessions,
        inbox=inbox, reporter=reporter, finisher=finisher, scheduler=scheduler,
        cancel_channel=cancel_channel, ttl_s=ttl, images=images,
        turn_deadline_s=s.turn_deadline_s, cap=cap, desk=desk, keep=suspensions.keep,
        uncertain=loop.tool_round.ask_uncertain_result,
        authorize=loop.tool_round.ask_authorization_result,
    )  # fmt: skip

    def events_credential() -> str:
        """The engine's own credential for agent.events (turns whose own one is gone)."""
        return signer.service(RECORDS, [record_scope(Topic.AGENT_EVENTS)])

    finisher.own_credential = events_credential
    memory_turns = MemoryTurns(
        s.memory_url, credential=lambda: signer.service("memory", ["memory:turns.read"])
    )
    auditor = TurnAuditor(
        record_credential=events_credential, restore=restorer.restore,
        redis=redis, finisher=finisher, turns=memory_turns, settings=audit,
        trails=trails,
        sentinel_key=f"weft:{s.topic_prefix}engine:sentinel", cancel_channel=cancel_channel,
        owner=runtime.instance_id, state_ttl_s=ttl,
        replay=RequestsReplay(
            redis=redis, trails=trails, handle=intake.on_chat_requested,
            requests=kafka_requests(
                s, runtime.bus.topic_name(Topic.AGENT_REQUESTS), RecordCheck(runtime.verifier)
            ),
            window_s=s.audit_requests_window_s,
            lock_key=f"weft:{s.topic_prefix}engine:requests-replayed",
        ),
    )  # fmt: skip
    runtime.bus.consume(Topic.AGENT_REQUESTS, REQUESTS_GROUP, intake.on_chat_requested)
    # Recording a result is idempotent: no consumer de-duplication (two Redis round trips).
    runtime.bus.consume(Topic.TOOL_RESULTS, RESULTS_GROUP, intake.on_tool_result, dedupe=False)
    runtime.bus.consume(Topic.AGENT_CONTROL, CONTROL_GROUP, intake.on_control)
    listener: list[asyncio.Task[None]] = []

    async def start_background() -> None:
        scheduler.start()
        listener.append(asyncio.create_task(intake.listen_for_cancels(), name="cancel-listener"))
        listener.append(asyncio.create_task(auditor.run(), name="turn-auditor"))
        listener.append(asyncio.create_task(intake.retry_starts(), name="pending-starts"))

    async def stop_background() -> None:
        await cancel_and_wait(listener)
        await scheduler.stop(s.shutdown_grace_s)
        await llm.aclose()
        await context.aclose()
        await memory_turns.aclose()
        if provider is not None:
            provider.shutdown()  # flushes the spans still batched

    return create_service_app(
        runtime, title="weft engine", on_startup=[start_background],
        on_shutdown=[stop_background], readiness={"turn_state": auditor.ready},
    )  # fmt: skip
