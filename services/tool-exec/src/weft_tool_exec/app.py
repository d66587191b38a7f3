"""App factory of tool-exec."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, FastAPI
from opentelemetry.sdk.trace import TracerProvider
from weft_contracts import Topic
from weft_mcp_client.safe_http import AddressPolicy, SafeHttpClient
from weft_mcp_client.transport import pinned_client_factory
from weft_platform.app import create_service_app, init_logging
from weft_platform.fair_buffer import ReadAhead
from weft_platform.fair_consumer import FairConsumer
from weft_platform.internal_auth import InternalAuth, SystemRoute
from weft_platform.runtime import ServiceRuntime, create_runtime
from weft_platform.tenant_slots import TenantSlots
from weft_platform.tracing import process_provider, propagation_hooks
from weft_platform.web_snapshots import RedisSnapshotStore
from weft_tools.aliases import RedisAliasBook
from weft_tools.builtin import ToolDependencies, builtin_registry
from weft_tools.database_query import QueryLimits
from weft_tools.duckdb_workspace import DuckDBWorkspace
from weft_tools.knowledge_client import RETRIEVE_SCOPE, KnowledgeClient
from weft_tools.mcp_calls import McpCaller
from weft_tools.mcp_directory import HttpMcpDirectory
from weft_tools.mcp_pool import McpSessionPool
from weft_tools.memory_tools import MemoryServiceClient
from weft_tools.web_search import BraveSearchProvider

from weft_tool_exec.ledger import CallLedger
from weft_tool_exec.settings import ToolExecSettings
from weft_tool_exec.tracing import WorkerTracer
from weft_tool_exec.turn_end import TurnEndCleaner
from weft_tool_exec.worker import ToolWorker

CONSUMER_GROUP = "weft-tool-exec"
ISSUER = "tool-exec"
"""The issuer of tool-exec's own service credentials (a shared agent's knowledge reads)."""

__all__ = ["CONSUMER_GROUP", "ToolExecSettings", "create_app"]


def tool_dependencies(runtime: ServiceRuntime, settings: ToolExecSettings) -> ToolDependencies:
    """The built-in tools' dependencies from the settings."""
    signer = runtime.signer(ISSUER)
    policy = AddressPolicy(allow_loopback=settings.web_fetch_allow_loopback)
    search = None
    if settings.web_search_api_key:
        search = BraveSearchProvider(
            settings.web_search_api_key,
            base_url=settings.web_search_base_url,
            timeout_s=settings.web_search_timeout_s,
        )
    return ToolDependencies(
        memory=MemoryServiceClient(event_hooks=propagation_hooks()),
        knowledge=KnowledgeClient(
            settings.knowledge_url,
            timeout_s=settings.knowledge_timeout_s,
            event_hooks=propagation_hooks(),
            own_credential=lambda: signer.service("knowledge", [RETRIEVE_SCOPE]),
        ),
        sessions=runtime.sessions,
        snapshots=RedisSnapshotStore(runtime.redis),
        aliases=RedisAliasBook(runtime.redis),
        http=SafeHttpClient(policy=policy),
        search_provider=search,
        web_fetch_timeout_s=settings.web_fetch_timeout_s,
        sql_limits=QueryLimits(
            max_rows=settings.sql_query_max_rows, timeout_ms=settings.sql_query_timeout_ms
        ),
        workspace=DuckDBWorkspace(memory_limit=settings.duckdb_memory_limit),
        mcp=mcp_caller(settings),
    )


def mcp_caller(settings: ToolExecSettings) -> McpCaller:
    """MCP calls through the pinned client, with the operator's allowlist (SPEC T-19)."""
    policy = settings.mcp_policy()
    pool = McpSessionPool(pinned_client_factory(policy), idle_s=settings.mcp_session_idle_s)
    return McpCaller(
        HttpMcpDirectory(settings.agent_config_url, event_hooks=propagation_hooks()),
        pool,
        request_timeout_s=settings.mcp_request_timeout_s,
        catalog_ttl_s=settings.mcp_catalog_ttl_s,
    )


SYSTEM_ROUTES = {"/internal/state": SystemRoute("tool-exec:state", frozenset({"operator"}))}
"""Operators' view of a worker; tool-exec has no tenant route."""


def create_app(settings: ToolExecSettings | None = None) -> FastAPI:
    """Wire ``tool_concurrency`` consumers of ``tool.calls`` (the ingestion workers are
    knowledge's, ``python -m weft_knowledge worker``)."""
    settings = settings or ToolExecSettings()
    runtime = create_runtime(settings)
    init_logging(runtime)
    deps = tool_dependencies(runtime, settings)
    registry = builtin_registry(deps)
    ledger = CallLedger(runtime.redis, settings.topic_prefix)
    # The process's provider (init_logging installed it), with the platform's sampler.
    provider = process_provider() if settings.tracing_exporter != "none" else None
    tracer = WorkerTracer(provider, runtime.instance_id)
    worker = ToolWorker(runtime.bus, registry, runtime.instance_id, ledger, tracer)
    calls = fair_calls(runtime, settings, worker)
    cleaner = TurnEndCleaner(registry)
    cleaner.subscribe(runtime.bus)
    return create_service_app(
        runtime,
        title="weft tool-exec",
        routers=[state_router(runtime, deps, cleaner, calls)],
        internal=InternalAuth(runtime.verifier, "tool-exec", SYSTEM_ROUTES),
        on_startup=[cleaner.start, calls.start],
        on_shutdown=[
            calls.stop,
            cleaner.stop,
            deps.mcp.pool.close,
            deps.knowledge.aclose,
            lambda: _flush(provider),
        ],
    )


def fair_calls(
    runtime: ServiceRuntime, settings: ToolExecSettings, worker: ToolWorker
) -> FairConsumer:
    """The consumer of ``tool.calls``: ``tool_concurrency`` runners per worker (invariant
    6), taking calls round-robin by tenant, each tenant capped at
    ``tool_tenant_max_inflight`` calls across replicas and ``tool_tenant_max_local`` runners
    of this worker (invariant 5; docs/fairness.md)."""
    slots = TenantSlots(
        runtime.redis,
        f"{settings.topic_prefix}tool-exec",
        cap=settings.tool_tenant_max_inflight,
        lease_s=settings.tool_slot_lease_s,
    )
    calls = FairConsumer(
        runtime.bus,
        Topic.TOOL_CALLS,
        CONSUMER_GROUP,
        worker.handle,
        slots=slots,
        concurrency=settings.tool_concurrency,
        read_ahead=ReadAhead(
            max_buffered=settings.tool_read_ahead,
            partition_buffer=settings.tool_partition_read_ahead,
        ),
        holder_prefix=runtime.instance_id,
        tenant_max_local=settings.tool_tenant_max_local,
    )
    calls.register()
    return calls


async def _flush(provider: TracerProvider | None) -> None:
    """Export the spans still batched before the process exits."""
    if provider is not None:
        provider.shutdown()


def state_router(
    runtime: ServiceRuntime,
    deps: ToolDependencies,
    cleaner: TurnEndCleaner,
    calls: FairConsumer,
) -> APIRouter:
    """``GET /internal/state``: what this process holds between calls (operators, tests).

    Per-session state lives in each worker's memory, so this is the one place to see
    whether turn-end cleanups (T-04) keep it from growing.
    """
    router = APIRouter()

    @router.get("/internal/state")
    async def state() -> dict[str, Any]:
        return {
            "instance": runtime.instance_id,
            "turns_cleaned": cleaner.cleaned,
            "duckdb_tables_by_session": deps.workspace.tables_by_session(),
            "mcp_sessions": deps.mcp.pool.open_sessions(),
            "tool_calls": calls.state(),
        }

    return router
