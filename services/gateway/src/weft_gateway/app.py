"""App factory of the gateway."""

from __future__ import annotations

from functools import partial

from fastapi import FastAPI
from redis.asyncio import Redis
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from weft_contracts import Topic
from weft_platform.app import create_service_app, init_logging
from weft_platform.body_limit import BodyLimit
from weft_platform.budgets import TenantBudgetPolicy, TokenBudgets
from weft_platform.bus import EventBus
from weft_platform.credentials import GATEWAY, CredentialSigner
from weft_platform.redis_client import redis_client
from weft_platform.retry import RetryWindow
from weft_platform.runtime import ServiceRuntime, create_runtime
from weft_storage.gateway.budgets import budget_override

from weft_gateway.access_cap import AccessCap
from weft_gateway.admin_api import AdminServices, admin_router
from weft_gateway.admin_auth import OperatorAuth
from weft_gateway.admin_port import AdminPortSplit, RequireAdminPort
from weft_gateway.api import Gateway
from weft_gateway.approvals_api import Approvals, approvals_router
from weft_gateway.approvals_client import ApprovalsClient
from weft_gateway.audit_log import AuditLog
from weft_gateway.auth import ApiKeyAuth
from weft_gateway.budget_gate import BudgetGate
from weft_gateway.clients import AgentConfigClient, ServiceClient, SessionsClient
from weft_gateway.console_assets import console_sign_in, mount_console
from weft_gateway.end_users import EndUserAuth
from weft_gateway.fanout import StreamFanout
from weft_gateway.files_api import SandboxFilesClient, files_router
from weft_gateway.fork_api import fork_router
from weft_gateway.key_registry import KeyRegistry
from weft_gateway.knowledge_api import knowledge_router
from weft_gateway.knowledge_client import KnowledgeClient
from weft_gateway.knowledge_scope import KnowledgeScope
from weft_gateway.limits import TenantLimits
from weft_gateway.mcp_oauth import McpCallback, mcp_oauth_router
from weft_gateway.mcp_servers_api import mcp_servers_router
from weft_gateway.mentions import MentionResolver
from weft_gateway.notices import register_notice_projector
from weft_gateway.projector import StreamProjector, log_rebuild
from weft_gateway.question_origin import QuestionOrigins
from weft_gateway.routes import agents_router, public_router, shared_agents_router
from weft_gateway.session_cache import SessionDirectory
from weft_gateway.settings import GatewaySettings
from weft_gateway.skills_api import skills_router
from weft_gateway.sse_slots import StreamSlots
from weft_gateway.streams import SessionStreams
from weft_gateway.suggestions_api import SuggestionsClient, suggestions_router
from weft_gateway.tenant_lifecycle import TenantLifecycle
from weft_gateway.tenant_owners import tenant_data_owners
from weft_gateway.tenant_purge import DataPurger
from weft_gateway.tenant_registry import TenantRegistry
from weft_gateway.turn_renewal import TurnRenewal, renewal_router
from weft_gateway.upload_origin import UploadOrigins
from weft_gateway.usage_client import USAGE_SCOPE, UsageReader
from weft_gateway.wiki_api import wiki_router

PROJECTOR_GROUP = "weft-gateway-projector"


def session_streams(redis: Redis, s: GatewaySettings) -> SessionStreams:
    """The session streams as the gateway's settings shape them."""
    return SessionStreams(
        redis, max_len=s.stream_max_len, retention_s=s.stream_retention_s,
        marks_key=f"weft:{s.topic_prefix}projector:marks",
    )  # fmt: skip


def register_projector(
    bus: EventBus, s: GatewaySettings, streams: SessionStreams, limits: TenantLimits
) -> None:
    """Subscribe the projector group to ``agent.events`` in batches: one Redis pipeline
    and one offset commit per Kafka fetch; it de-duplicates exactly by (turn, seq), and
    writes the recent log again when Redis lost the streams (``StreamProjector``)."""
    topic = bus.topic_name(Topic.AGENT_EVENTS)
    rebuild = log_rebuild(s, topic, s.projector_rebuild_s, streams)
    projector = StreamProjector(streams, limits, rebuild)
    bus.consume_batch(
        Topic.AGENT_EVENTS,
        PROJECTOR_GROUP,
        projector.handle_batch,
        max_records=s.projector_batch_max,
        positions=True,
    )


def create_projector_app(settings: GatewaySettings | None = None) -> FastAPI:
    """A projector-only process (``python -m weft_gateway projector``): health routes and
    the projector group, no public API, so projection never waits behind SSE writes.
    Scale it like any consumer group (replicas up to the partition count); run the
    gateways with ``WEFT_PROJECTOR=off``."""
    s = settings or GatewaySettings(service_name="gateway-projector")
    runtime = create_runtime(s)
    init_logging(runtime)
    streams = session_streams(runtime.redis, s)
    limits = TenantLimits(
        runtime.redis,
        requests_per_minute=s.rate_limit_per_minute,
        concurrent_turns=s.max_concurrent_turns,
        turn_ttl_s=s.turn_slot_ttl_s,
    )
    register_projector(runtime.bus, s, streams, limits)
    register_notice_projector(
        runtime.bus, runtime.redis, max_len=s.stream_max_len, retention_s=s.stream_retention_s
    )
    return create_service_app(runtime, title="Weft gateway projector")


def budget_policy(runtime: ServiceRuntime, s: GatewaySettings) -> TenantBudgetPolicy:
    """Token budgets: the settings' defaults, overridden by ``tenant_budgets`` rows."""
    return TenantBudgetPolicy(
        s.budget_defaults(), partial(budget_override, runtime.sessions), cache_s=s.budget_cache_s
    )


def create_app(settings: GatewaySettings | None = None) -> FastAPI:
    """Wire the public API and the projector."""
    s = settings or GatewaySettings()
    runtime = create_runtime(s)
    init_logging(runtime)
    # SSE connects come in bursts of thousands: their Redis calls wait for a pooled
    # connection instead of failing when the pool is busy.
    redis = redis_client(
        s.redis_url,
        health_check_s=s.redis_health_check_s,
        max_connections=s.redis_max_connections,
        wait_s=s.redis_wait_s,
    )
    streams = session_streams(redis, s)
    retry = RetryWindow(window_s=s.internal_retry_window_s)
    memory = SessionsClient(
        s.memory_url, "memory", s.internal_timeout_s, s.internal_max_connections, retry=retry
    )
    prompts = ApprovalsClient(
        s.memory_url, "memory", s.internal_timeout_s, s.internal_max_connections, retry=retry
    )
    agents = AgentConfigClient(
        s.agent_config_url,
        "agent-config",
        s.internal_timeout_s,
        s.internal_max_connections,
        retry=retry,
    )
    suggestions = SuggestionsClient(
        s.suggestions_url,
        "suggestions",
        s.internal_timeout_s,
        s.internal_max_connections,
        retry=retry,
    )
    sandbox = SandboxFilesClient(
        s.sandbox_url, "sandbox", s.internal_timeout_s, s.internal_max_connections, retry=retry
    )
    directory = SessionDirectory(
        redis, memory, ttl_s=s.session_cache_ttl_s, lookup_timeout_s=s.session_lookup_timeout_s
    )
    limits = TenantLimits(
        redis,
        requests_per_minute=s.rate_limit_per_minute,
        concurrent_turns=s.max_concurrent_turns,
        turn_ttl_s=s.turn_slot_ttl_s,
    )
    knowledge = KnowledgeClient(
        s.knowledge_url, "knowledge", s.internal_timeout_s, s.internal_max_connections,
        retry=retry,
    )  # fmt: skip
    kb_scope = KnowledgeScope(knowledge, knowledge)
    fanout = StreamFanout(redis)
    slots = StreamSlots(redis, max_per_tenant=s.sse_max_per_tenant, lease_s=s.sse_lease_s)
    signer = runtime.signer(GATEWAY)
    tenants = TenantRegistry(runtime.sessions)
    end_users = EndUserAuth(
        tenants,
        issuer_cache_s=s.end_user_issuer_cache_s,
        jwks_cache_s=s.end_user_jwks_cache_s,
        leeway_s=s.end_user_leeway_s,
        max_lifetime_s=s.end_user_max_token_lifetime_s,
    )
    auth = ApiKeyAuth(
        runtime.sessions,
        limits,
        cache_s=s.auth_cache_s,
        signer=signer,
        credential_ttl_s=s.api_credential_ttl_s,
        end_users=end_users,
    )
    usage = UsageReader(
        ServiceClient(s.memory_url, "memory", s.internal_timeout_s, retry=retry),
        lambda: signer.service("memory", [USAGE_SCOPE]),
    )
    admin = _admin_services(s, runtime.sessions, redis, tenants, signer, usage)
    budgets = budget_policy(runtime, s)
    gateway = Gateway(
        settings=s,
        bus=runtime.bus,
        redis=redis,
        streams=streams,
        fanout=fanout,
        memory=memory,
        directory=directory,
        agents=agents,
        limits=limits,
        knowledge=kb_scope,
        signer=signer,
        budget=BudgetGate(TokenBudgets(redis), budgets),
        slots=slots,
        origins=QuestionOrigins(suggestions, knowledge),
        access_cap=AccessCap(runtime.sessions, cache_s=s.access_cap_cache_s),
        prompts=prompts,
        mentions=MentionResolver(knowledge),
    )
    approvals = Approvals(
        memory=prompts, bus=runtime.bus, signer=signer, turn_ttl_s=s.turn_deadline_s,
        lookup_wait_s=s.approval_lookup_wait_s,
    )  # fmt: skip
    renewal = TurnRenewal(
        verifier=runtime.verifier, signer=signer, sessions=runtime.sessions,
        ttl_s=s.turn_deadline_s, max_age_s=s.turn_renewal_max_age_s,
    )  # fmt: skip
    if s.projector == "embedded":
        register_projector(runtime.bus, s, streams, limits)
        register_notice_projector(
            runtime.bus, redis, max_len=s.stream_max_len, retention_s=s.stream_retention_s
        )

    async def register_dev_key() -> None:
        # Unset: every development key is revoked, so a production start never keeps one.
        if s.dev_api_key:
            await tenants.ensure(s.dev_tenant)
        await admin.keys.apply_dev_key(s.dev_tenant, s.dev_user, s.dev_api_key)

    app = create_service_app(
        runtime,
        title="Weft gateway",
        routers=[
            public_router(gateway, auth),
            fork_router(gateway, auth),
            files_router(
                memory, sandbox, auth, max_bytes=s.attachment_max_bytes, types=s.attachment_types
            ),
            agents_router(agents, auth, kb_scope),
            shared_agents_router(agents, auth),
            mcp_servers_router(agents, auth),
            suggestions_router(suggestions, directory, auth),
            knowledge_router(
                knowledge, auth, kb_scope, document_wait_s=s.document_wait_s,
                origins=UploadOrigins(directory, budgets),
            ),
            wiki_router(knowledge, auth, kb_scope),
            skills_router(agents, auth),
            admin_router(admin, port_check=_port_check(s)),
            approvals_router(approvals, auth, max_body_bytes=s.approval_body_max_bytes),
            renewal_router(renewal),
            mcp_oauth_router(
                McpCallback(agent_config=agents, approvals=approvals, signer=signer,
                            lookup_wait_s=s.approval_lookup_wait_s)
            ),
        ],
        on_startup=[register_dev_key, admin.lifecycle.start],
        on_shutdown=[
            admin.lifecycle.stop, end_users.aclose, slots.aclose, fanout.aclose, memory.aclose,
            prompts.aclose, admin.purger.aclose,
            agents.aclose, suggestions.aclose, sandbox.aclose, knowledge.aclose, usage.aclose,
            redis.aclose,
        ],
    )  # fmt: skip
    app.state.operator_auth = OperatorAuth.from_setting(s.admin_token_sha256)
    mount_console(app, s.console_dir, console_sign_in(s))
    app.add_middleware(BodyLimit, max_bytes=s.max_body_bytes)
    if s.admin_port is not None:  # outermost: a wrong port's request is refused first
        app.add_middleware(AdminPortSplit, admin_port=s.admin_port)
    return app


def _port_check(s: GatewaySettings) -> RequireAdminPort | None:
    return RequireAdminPort(s.admin_port) if s.admin_port is not None else None


def _admin_services(
    s: GatewaySettings,
    sessions: async_sessionmaker[AsyncSession],
    redis: Redis,
    tenants: TenantRegistry,
    signer: CredentialSigner,
    usage: UsageReader,
) -> AdminServices:
    audit = AuditLog(sessions)
    memory, owners = tenant_data_owners(s, sessions, signer)
    purger = DataPurger(memory, owners, redis, prefix=s.topic_prefix)
    lifecycle = TenantLifecycle(
        memory=memory, redis=redis, registry=tenants, purger=purger, audit=audit,
        interval_s=s.maintenance_interval_s,
        lock_key=f"weft:{s.topic_prefix}admin:maintenance", watch_s=s.purge_watch_s,
    )  # fmt: skip
    return AdminServices(
        tenants=tenants, keys=KeyRegistry(sessions), audit=audit, purger=purger,
        lifecycle=lifecycle, sessions=sessions, usage=usage,
    )  # fmt: skip
