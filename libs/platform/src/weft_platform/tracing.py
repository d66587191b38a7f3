"""Tracing of every service: one process-wide provider, spans for HTTP requests and
consumed records, and the W3C ``traceparent`` carried from one to the next.

A trace starts at the gateway's HTTP request (:mod:`weft_platform.http_tracing`); what the
request publishes carries its ``traceparent`` in the envelope (``EventBus.publish`` fills
it in from the current span); a consumer continues from the envelope's ``traceparent``
(:func:`consuming`); an internal HTTP call sends it as a header
(:func:`propagation_hooks`) and the callee continues from it. The engine's turn spans
(``weft_engine.tracing``) and tool-exec's worker spans join the same trace.

Exporters (setting ``WEFT_TRACING_EXPORTER``): ``none`` (no span is recorded; trace ids
are still made and propagated, so log lines carry them), ``otlp`` (OTLP over HTTP,
configured with the standard ``OTEL_EXPORTER_OTLP_*`` variables, and the default when
``OTEL_EXPORTER_OTLP_ENDPOINT`` is set), ``console`` (JSON on stdout), ``file`` (one JSON
span a line in ``WEFT_TRACING_FILE``: tests). Sampling: ``ParentBased(TraceIdRatioBased(
WEFT_TRACING_SAMPLE_RATIO))``: a new trace is recorded with that probability, a continued
one as its caller decided. A span sampled out is a non-recording span: no attributes, no
export, a few microseconds.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import httpx
import structlog
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.sdk.trace.sampling import (
    ALWAYS_OFF,
    ParentBased,
    Sampler,
    TraceIdRatioBased,
)
from opentelemetry.trace import SpanKind
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from weft_platform.settings import ServiceSettings, TracingExporter

TRACER = "weft"
"""Instrumentation scope of the platform's spans (HTTP, consumed records)."""

REQUEST_ID_HEADER = "x-weft-request-id"
TENANT_ID_HEADER = "x-weft-tenant-id"
"""Headers an internal call carries so the callee's log lines name the same turn."""

_PROPAGATOR = TraceContextTextMapPropagator()
_process_provider: TracerProvider | None = None


def ratio_sampler(ratio: float) -> Sampler:
    """``ParentBased(TraceIdRatioBased(ratio))``: the sampler of every service."""
    return ParentBased(TraceIdRatioBased(ratio))


class FileSpanExporter(SpanExporter):
    """Spans as JSON lines appended to a file (exporter ``file``: tests read the tree).
    Each export is one ``write`` on an ``O_APPEND`` descriptor, so the processes of a
    stack (and the engine's two providers) can share one file without torn lines."""

    def __init__(self, path: str):
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        lines = "".join(json.dumps(json.loads(s.to_json(indent=None))) + "\n" for s in spans)
        os.write(self._fd, lines.encode())
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        os.close(self._fd)


def span_exporter(exporter: TracingExporter, file: str = "") -> SpanExporter | None:
    """The span exporter the setting names, None for ``none``."""
    match exporter:
        case "none":
            return None
        case "console":
            return ConsoleSpanExporter()
        case "file":
            if not file:
                raise ValueError("WEFT_TRACING_EXPORTER=file needs WEFT_TRACING_FILE")
            return FileSpanExporter(file)
        case "otlp":
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            return OTLPSpanExporter()


def build_provider(
    service: str,
    exporter: SpanExporter,
    *,
    instance_id: str = "",
    sampler: Sampler | None = None,
    id_generator: IdGenerator | None = None,
) -> TracerProvider:
    """A provider batching spans to ``exporter``, named ``service`` / ``instance_id``
    (the SDK's default sampler and ids unless given)."""
    resource = Resource.create({"service.name": service, "service.instance.id": instance_id})
    provider = TracerProvider(sampler=sampler, resource=resource, id_generator=id_generator)
    provider.add_span_processor(BatchSpanProcessor(exporter))
    return provider


def install(settings: ServiceSettings, instance_id: str) -> TracerProvider:
    """The process's provider from the settings, made the global one (once per process:
    a second call returns the first provider). Without an exporter it samples nothing but
    still makes trace ids, which requests, records and log lines carry."""
    global _process_provider
    if _process_provider is not None:
        return _process_provider
    service = f"weft-{settings.service_name}"
    spans = span_exporter(settings.tracing_exporter, settings.tracing_file)
    if spans is None:
        resource = Resource.create({"service.name": service, "service.instance.id": instance_id})
        provider = TracerProvider(sampler=ALWAYS_OFF, resource=resource)
    else:
        provider = build_provider(
            service, spans, instance_id=instance_id,
            sampler=ratio_sampler(settings.tracing_sample_ratio),
        )  # fmt: skip
    trace.set_tracer_provider(provider)
    _process_provider = provider
    return provider


def process_provider() -> TracerProvider | None:
    """The provider :func:`install` made, if any."""
    return _process_provider


def tracer() -> trace.Tracer:
    """The platform's tracer (of the global provider)."""
    return trace.get_tracer(TRACER)


def format_traceparent(context: trace.SpanContext) -> str:
    """W3C ``traceparent`` of ``context``."""
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"


def current_traceparent() -> str | None:
    """W3C ``traceparent`` of the current span, None outside any span."""
    context = trace.get_current_span().get_span_context()
    return format_traceparent(context) if context.is_valid else None


def current_trace_id() -> str | None:
    """Hex trace id of the current span, None outside any span."""
    context = trace.get_current_span().get_span_context()
    return f"{context.trace_id:032x}" if context.is_valid else None


def parent_context(traceparent: str | None) -> Context | None:
    """The context continuing ``traceparent`` (None when absent; a malformed value gives
    an empty context, so the span starts a new trace)."""
    if not traceparent:
        return None
    return _PROPAGATOR.extract({"traceparent": traceparent})


@contextmanager
def consuming(topic: str, message: Any) -> Iterator[None]:
    """Around the handling of one consumed envelope: a CONSUMER span continuing the
    envelope's ``traceparent``, and log lines bound to its trace, tenant and request."""
    with tracer().start_as_current_span(
        f"{topic} process",
        context=parent_context(getattr(message, "traceparent", None)),
        kind=SpanKind.CONSUMER,
    ) as span:
        if span.is_recording():
            span.set_attribute("messaging.destination.name", topic)
            span.set_attribute("messaging.message.id", str(message.id))
            span.set_attribute("weft.request_id", str(message.request_id))
        with structlog.contextvars.bound_contextvars(
            trace_id=f"{span.get_span_context().trace_id:032x}",
            tenant_id=message.tenant_id,
            request_id=message.request_id,
        ):
            yield


async def _inject(request: httpx.Request) -> None:
    """httpx request hook: the current trace and the log context travel to the callee."""
    traceparent = current_traceparent()
    if traceparent is not None:
        request.headers["traceparent"] = traceparent
    bound = structlog.contextvars.get_contextvars()
    for key, header in (("request_id", REQUEST_ID_HEADER), ("tenant_id", TENANT_ID_HEADER)):
        value = bound.get(key)
        if value is not None:
            request.headers[header] = str(value)


def propagation_hooks() -> Mapping[str, list[Any]]:
    """``event_hooks=`` of an httpx client calling another Weft service (never a third
    party: the trace id and the tenant stay inside the deployment)."""
    return {"request": [_inject]}
