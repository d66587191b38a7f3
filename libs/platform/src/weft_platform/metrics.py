"""Every Prometheus metric of Weft, defined in this one module (docs/observability.md).

The names live here so that dashboards, alert rules and code agree on one catalog; the
services import the objects and only increment, set or observe them (a counter increment
or a histogram observation on the hot path, nothing more). Gauges that need a look at
shared state (consumer lag, ingestion queue depth, approvals waiting) are computed when
Prometheus scrapes, or from a count cached at most every 15 s, never per event.

Labels stay bounded: never a session, request or user id. The tenant is a label only of
the turn, tool-call and budget counters and only with ``WEFT_METRICS_TENANT_LABEL=true``,
capped at ``WEFT_METRICS_TENANT_LABEL_MAX`` distinct values (:class:`TenantLabels`); with
the setting off its value is empty, which Prometheus treats as no label at all.

Each process serves its registry on its own metrics port (:func:`serve_metrics`), never
on an API port. Objects live in prometheus_client's default registry, so a process's
metrics include the process and platform collectors (CPU, memory, file descriptors).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any
from wsgiref.simple_server import WSGIServer

import structlog
from prometheus_client import (
    REGISTRY,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    start_http_server,
)

from weft_platform.consumer_lag import ConsumerLagCollector
from weft_platform.settings import ServiceSettings

log = structlog.get_logger(__name__)

# The ``_created`` series of every counter and histogram would double what a scrape
# carries and no dashboard or alert reads them.
disable_created_metrics()  # type: ignore[no-untyped-call]

OTHER = "other"
"""The label value of every tenant (or model) past the cap of distinct values."""

# --- engine: turns, rounds, model calls ----------------------------------------------

TURNS_STARTED = Counter(
    "weft_turns_started",
    "Turns the engine started, by agent mode.",
    ["mode", "tenant"],
)
TURNS_ENDED = Counter(
    "weft_turns_ended",
    "Turns the engine ended, by status (completed/failed/cancelled) and end reason (SPEC "
    "E-20: answered, stopped, iteration_limit, deadline_exceeded, over_budget, "
    "model_failed, context_overflow, closing_failed, too_many_takeovers, quick_answered).",
    ["status", "reason", "tenant"],
)
TURN_DURATION = Histogram(
    "weft_turn_duration_seconds",
    "Wall time of a turn, from its request to its complete event.",
    ["status"],
    buckets=(0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600),
)
ROUNDS = Counter("weft_rounds", "Rounds (one model call and its tool calls) the engine ran.")
ROUND_DURATION = Histogram(
    "weft_round_duration_seconds",
    "Wall time of one round's model call, from request to last streamed token.",
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120),
)
LLM_REQUEST_DURATION = Histogram(
    "weft_llm_request_duration_seconds",
    "Duration of one model request (streamed to its end), by model.",
    ["model"],
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300),
)
LLM_TIME_TO_FIRST_TOKEN = Histogram(
    "weft_llm_time_to_first_token_seconds",
    "Time from a model request to its first streamed token, by model.",
    ["model"],
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 60),
)
LLM_TOKENS = Counter(
    "weft_llm_tokens",
    "Tokens the provider counted, by model and kind (prompt/completion).",
    ["model", "kind"],
)
LLM_ERRORS = Counter(
    "weft_llm_errors",
    "Model requests that failed, by model and reason (a short error kind).",
    ["model", "reason"],
)

# --- tools -----------------------------------------------------------------------------

TOOL_CALLS = Counter(
    "weft_tool_calls",
    "Tool calls executed, by tool (built-in name; every MCP tool counts as mcp) and "
    "outcome (success/error/timeout/refused).",
    ["tool", "outcome", "tenant"],
)
TOOL_CALL_DURATION = Histogram(
    "weft_tool_call_duration_seconds",
    "Duration of one tool call's execution, by tool.",
    ["tool"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600),
)

# --- Kafka -----------------------------------------------------------------------------

KAFKA_CONSUMER_LAG = ConsumerLagCollector("weft_kafka_consumer_lag", registry=REGISTRY)
"""Gauge by ``group``, ``topic``, ``partition``: the consumer's own highwater minus the
offset after its last handled record, computed at scrape time from what the consumer
already knows (no admin call; ``weft_platform.consumer_lag``)."""

DEAD_LETTERS = Counter(
    "weft_dead_letters",
    "Records written to the dead-letter topic, by source topic and reason (undecodable, "
    "unsupported_schema_version, credential_rejected, handler_failed).",
    ["topic", "reason"],
)

# --- HTTP and SSE ----------------------------------------------------------------------

HTTP_REQUESTS = Counter(
    "weft_http_requests",
    "HTTP requests answered, by method, route template (never the raw path) and status.",
    ["method", "route", "status"],
)
HTTP_REQUEST_DURATION = Histogram(
    "weft_http_request_duration_seconds",
    "Duration of an HTTP request until its response ended (an event stream: until it "
    "opened), by method and route template.",
    ["method", "route"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
)
SSE_CONNECTIONS = Gauge("weft_sse_connections", "Open SSE streams of this gateway.")
SSE_SEND_LATENCY = Histogram(
    "weft_sse_send_latency_seconds",
    "From an event's time (as the engine stamped it) to its frame written to the client.",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)

# --- ingestion, sandbox, budgets, approvals --------------------------------------------

INGESTION_QUEUE_DEPTH = Gauge(
    "weft_ingestion_queue_depth",
    "Knowledge ingestion jobs by state (a count cached at most every 15 s).",
    ["state"],
)
KNOWLEDGE_JOB_QUEUE_DEPTH = Gauge(
    "weft_knowledge_job_queue_depth",
    "Jobs the ingestion workers run after a document is ingested, not finished yet, by "
    "queue (wiki: page generation; graph: extraction) and state (a count cached at most "
    "every 15 s).",
    ["queue", "state"],
)
SANDBOX_WORKSPACES_OPEN = Gauge(
    "weft_sandbox_workspaces_open", "Session workspaces this sandbox replica holds."
)
SANDBOX_WORKSPACE_BYTES = Gauge(
    "weft_sandbox_workspace_bytes", "Bytes used by the workspaces this sandbox replica holds."
)
BUDGET_REJECTIONS = Counter(
    "weft_budget_rejections",
    "Requests or turns refused because a budget ran out, by scope.",
    ["scope", "tenant"],
)
APPROVALS_WAITING = Gauge(
    "weft_approvals_waiting",
    "Tool approval prompts waiting for a decision (a count cached at most every 15 s).",
)
APPROVAL_DECISIONS = Counter(
    "weft_approval_decisions",
    "Tool approval prompts decided, by outcome (approved/denied/expired).",
    ["outcome"],
)


# --- the tenant label ------------------------------------------------------------------


@dataclass
class BoundedLabel:
    """Values of a label that callers do not bound themselves (tenants, model names an
    agent configures): at most ``cap`` distinct values (the first this process sees);
    every later one is ``other``, so a deployment with thousands of them cannot grow a
    series per value. ``enabled`` False: the value is always empty (no label)."""

    enabled: bool = True
    cap: int = 50
    _seen: set[str] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def label(self, value: str) -> str:
        """The label value for ``value``."""
        if not self.enabled:
            return ""
        if value in self._seen:
            return value
        with self._lock:
            if len(self._seen) < self.cap:
                self._seen.add(value)
                return value
        return OTHER


TENANTS = BoundedLabel(enabled=False)
"""This process's tenant labels (set from settings by :func:`configure_metrics`)."""

MODELS = BoundedLabel(cap=50)
"""The ``model`` label values (an agent names its model: bounded like tenants)."""


def tenant_label(tenant_id: str) -> str:
    """The ``tenant`` label value of ``tenant_id`` under this process's settings."""
    return TENANTS.label(tenant_id)


def model_label(model: str) -> str:
    """The ``model`` label value of ``model``."""
    return MODELS.label(model)


class PrometheusLLMMeter:
    """The ``weft_llm.LLMMeter`` of every service that calls a model (engine, memory,
    suggestions): ``weft_llm_*`` by bounded model label."""

    def failed(self, model: str, reason: str) -> None:
        """Count a failed call."""
        LLM_ERRORS.labels(model_label(model), reason).inc()

    def answered(self, model: str, seconds: float, first_token_s: float | None, usage: Any) -> None:
        """Observe an answered call (``usage``: ``weft_llm.Usage`` or None)."""
        label = model_label(model)
        LLM_REQUEST_DURATION.labels(label).observe(seconds)
        if first_token_s is not None:
            LLM_TIME_TO_FIRST_TOKEN.labels(label).observe(first_token_s)
        if usage is not None:
            LLM_TOKENS.labels(label, "prompt").inc(usage.prompt_tokens)
            LLM_TOKENS.labels(label, "completion").inc(usage.completion_tokens)


LLM_METER = PrometheusLLMMeter()


def observe_tool_call(tool: str, outcome: str, seconds: float, tenant_id: str) -> None:
    """One tool call answered (``tool`` and ``outcome`` already bounded labels)."""
    TOOL_CALLS.labels(tool, outcome, tenant_label(tenant_id)).inc()
    TOOL_CALL_DURATION.labels(tool).observe(seconds)


def budget_rejected(scope: str, tenant_id: str) -> None:
    """A budget refused a request or a turn (``scope``: which budget, a fixed word)."""
    BUDGET_REJECTIONS.labels(scope, tenant_label(tenant_id)).inc()


# --- serving ---------------------------------------------------------------------------


@dataclass
class MetricsServer:
    """The metrics HTTP server of one process (prometheus_client's, in a thread)."""

    server: WSGIServer
    thread: threading.Thread

    @property
    def port(self) -> int:
        """The port it listens on."""
        return int(self.server.server_address[1])

    def stop(self) -> None:
        """Stop serving and close the socket."""
        self.server.shutdown()
        self.server.server_close()


def configure_metrics(*, tenant_label_enabled: bool, tenant_label_max: int) -> None:
    """Apply the tenant-label settings to this process (once, in the app factory)."""
    TENANTS.enabled = tenant_label_enabled
    TENANTS.cap = tenant_label_max


def start_metrics(settings: ServiceSettings) -> MetricsServer | None:
    """Configure this process's metrics from ``settings`` and serve them on its metrics
    port (None when ``WEFT_METRICS_PORT=0``). A port that cannot be bound stops the
    process at start: an operator who set a port expects it served."""
    configure_metrics(
        tenant_label_enabled=settings.metrics_tenant_label,
        tenant_label_max=settings.metrics_tenant_label_max,
    )
    KAFKA_CONSUMER_LAG.strip_prefix(settings.topic_prefix)
    return serve_metrics(settings.effective_metrics_port, settings.metrics_host)


def serve_metrics(port: int, host: str) -> MetricsServer | None:
    """Serve this process's registry as Prometheus text on ``host:port`` (0: off)."""
    if port == 0:
        return None
    server, thread = start_http_server(port, addr=host, registry=REGISTRY)
    log.info("metrics_serving", host=host, port=port)
    return MetricsServer(server, thread)
