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
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import httpx
import structlog
from opentelemetry import context as otel_context
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
from opentelemetry.trace import NonRecordingSpan, SpanKind, Status, StatusCode, TraceFlags

from weft_platform.settings import ServiceSettings, TracingExporter

TRACER = "weft"
"""Instrumentation scope of the platform's spans (HTTP, consumed records)."""

REQUEST_ID_HEADER = "x-weft-request-id"
TENANT_ID_HEADER = "x-weft-tenant-id"
"""Headers an internal call carries so the callee's log lines name the same turn."""

_process_provider: TracerProvider | None = None
_process_tracer: trace.Tracer | None = None


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
    global _process_provider, _process_tracer
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
    _process_tracer = provider.get_tracer(TRACER)  # get_tracer costs ~10 us: once
    return provider


def process_provider() -> TracerProvider | None:
    """The provider :func:`install` made, if any."""
    return _process_provider


def tracer() -> trace.Tracer:
    """The platform's tracer (of the process's provider once installed, else the global)."""
    return _process_tracer if _process_tracer is not None else trace.get_tracer(TRACER)


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


def remote_parent(traceparent: str | None) -> trace.SpanContext | None:
    """The span context a W3C ``traceparent`` names (version 00), None when absent or
    malformed. A plain split: the propagator's regex parse costs ~10 us a record."""
    if not traceparent or len(traceparent) != 55:
        return None
    parts = traceparent.split("-")
    if len(parts) != 4:
        return None
    version, trace_hex, span_hex, flags_hex = parts
    if version != "00" or len(trace_hex) != 32 or len(span_hex) != 16 or len(flags_hex) != 2:
        return None
    try:
        trace_id, span_id, flags = int(trace_hex, 16), int(span_hex, 16), int(flags_hex, 16)
    except ValueError:
        return None
    if not trace_id or not span_id:
        return None
    return trace.SpanContext(trace_id, span_id, is_remote=True, trace_flags=TraceFlags(flags))


def parent_context(traceparent: str | None) -> Context | None:
    """The context continuing ``traceparent`` (None when absent or malformed: the span
    starts a new trace)."""
    parent = remote_parent(traceparent)
    return None if parent is None else trace.set_span_in_context(NonRecordingSpan(parent))


@contextmanager
def continued(
    name: str, traceparent: str | None, kind: SpanKind, **ids: str
) -> Iterator[trace.Span]:
    """A span continuing ``traceparent`` made current, and log lines bound to its trace id
    and ``ids``. A parent sampled out upstream is made current as it is: the sampler would
    drop the child anyway, and this skips making ids and a span for nothing (a few us,
    paid by every record and internal request of an unsampled trace)."""
    parent = remote_parent(traceparent)
    span: trace.Span
    if parent is not None and not parent.trace_flags.sampled:
        span = NonRecordingSpan(parent)
    else:
        context = None if parent is None else trace.set_span_in_context(NonRecordingSpan(parent))
        span = tracer().start_span(name, context=context, kind=kind)
    token = otel_context.attach(trace.set_span_in_context(span))
    bound = structlog.contextvars.bind_contextvars(
        trace_id=f"{span.get_span_context().trace_id:032x}", **ids
    )
    try:
        yield span
    except BaseException as exc:
        if span.is_recording():
            span.record_exception(exc)
            span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
        raise
    finally:
        structlog.contextvars.reset_contextvars(**bound)
        otel_context.detach(token)
        span.end()  # a NonRecordingSpan's end does nothing


@contextmanager
def consuming_batch(topic: str, messages: Iterable[Any]) -> Iterator[None]:
    """Around the handling of a batch (the projector, suggestions): a CONSUMER span for
    each record whose trace is sampled, child of its envelope's ``traceparent`` and as long
    as the batch's handling, so a sampled turn's trace shows the hop. Records of unsampled
    traces cost a parse, no span."""
    spans = []
    for message in messages:
        parent = remote_parent(getattr(message, "traceparent", None))
        if parent is None or not parent.trace_flags.sampled:
            continue
        span = tracer().start_span(
            f"{topic} process",
            context=trace.set_span_in_context(NonRecordingSpan(parent)),
            kind=SpanKind.CONSUMER,
        )
        if span.is_recording():
            span.set_attribute("messaging.destination.name", topic)
            span.set_attribute("messaging.message.id", str(message.id))
            span.set_attribute("weft.request_id", str(message.request_id))
        spans.append(span)
    try:
        yield
    finally:
        for span in spans:
            span.end()


@contextmanager
def consuming(topic: str, message: Any) -> Iterator[None]:
    """Around the handling of one consumed envelope: a CONSUMER span continuing the
    envelope's ``traceparent``, and log lines bound to its trace, tenant and request."""
    with continued(
        f"{topic} process",
        message.traceparent,
        SpanKind.CONSUMER,
        tenant_id=message.tenant_id,
        request_id=message.request_id,
    ) as span:
        if span.is_recording():
            span.set_attribute("messaging.destination.name", topic)
            span.set_attribute("messaging.message.id", str(message.id))
            span.set_attribute("weft.request_id", str(message.request_id))
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


def service_client(
    base_url: str,
    timeout_s: float,
    *,
    transport: httpx.AsyncBaseTransport | None = None,
    limits: httpx.Limits | None = None,
) -> httpx.AsyncClient:
    """An httpx client of another Weft service at ``base_url``, its requests carrying the
    trace (:func:`propagation_hooks`); ``transport``: tests serve the peer in process."""
    return httpx.AsyncClient(
        base_url=base_url, timeout=timeout_s, transport=transport,
        limits=limits or httpx.Limits(), event_hooks=propagation_hooks(),
    )  # fmt: skip
