"""Trace providers of the services that write spans (SPEC E-23): the engine and tool-exec.

Exporters (setting ``WEFT_TRACING_EXPORTER``): ``none`` (default: no provider, the
services' tracers do no work), ``console`` (JSON on stdout), ``otlp`` (OTLP over HTTP,
configured with the standard ``OTEL_EXPORTER_OTLP_*`` variables).
"""

from __future__ import annotations

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.sdk.trace.sampling import Sampler

from weft_platform.settings import TracingExporter


def span_exporter(exporter: TracingExporter) -> SpanExporter | None:
    """The span exporter the setting names, None for ``none``."""
    match exporter:
        case "none":
            return None
        case "console":
            return ConsoleSpanExporter()
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
