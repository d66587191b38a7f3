"""The worker's span of a tool call (SPEC E-23): ``tool.execute.<name>``.

The engine writes ``agent.tool.<name>`` for each call and puts that span's id in the
call's W3C ``traceparent`` (``TurnTracer.tool_traceparent``); the worker's span is its
child, so the trace shows the engine's view of a call (dispatch to result) and, under it,
the time the worker actually ran it. A call without a ``traceparent`` (the engine's
tracing is off) gets a root span of its own.

Exporters: ``WEFT_TRACING_EXPORTER``, as in the engine (``weft_platform.tracing``); with
``none`` there is no provider and a call costs one ``if``.
"""

from __future__ import annotations

import time

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import NonRecordingSpan, Status, StatusCode
from weft_contracts import ToolCallRequested
from weft_platform.settings import TracingExporter
from weft_platform.tracing import build_provider, remote_parent, span_exporter
from weft_tool_catalog import ToolOutcome

ERROR_PREVIEW_RUNES = 4000


def provider_from_settings(exporter: TracingExporter, instance_id: str) -> TracerProvider | None:
    """The provider for the ``WEFT_TRACING_EXPORTER`` setting, or None for ``none``."""
    spans = span_exporter(exporter)
    return (
        None if spans is None else build_provider("weft-tool-exec", spans, instance_id=instance_id)
    )


class WorkerTracer:
    """Writes ``tool.execute.<name>`` spans; does nothing without a provider."""

    def __init__(self, provider: TracerProvider | None, worker: str):
        self._tracer = provider.get_tracer("weft.tool_exec") if provider is not None else None
        self._worker = worker

    @property
    def enabled(self) -> bool:
        """Whether spans are written."""
        return self._tracer is not None

    def call_done(self, call: ToolCallRequested, outcome: ToolOutcome, started_ns: int) -> None:
        """The span of one call, from ``started_ns`` (epoch ns) to now."""
        if self._tracer is None:
            return
        remote = remote_parent(call.traceparent)
        if remote is not None and not remote.trace_flags.sampled:
            return  # the engine's turn is sampled out: the sampler would drop this span
        parent = None if remote is None else trace.set_span_in_context(NonRecordingSpan(remote))
        ended = max(time.time_ns(), started_ns)
        attributes: dict[str, str | int | bool] = {
            "weft.tool.name": call.data.tool_name,
            "weft.tool.call_id": call.data.call_id,
            "weft.worker": self._worker,
            "weft.request_id": call.request_id,
            "weft.tool.duration_ms": (ended - started_ns) // 1_000_000,
            "weft.tool.error": not outcome.success,
        }
        if outcome.error:
            attributes["weft.tool.error_message"] = outcome.error[:ERROR_PREVIEW_RUNES]
        span = self._tracer.start_span(
            f"tool.execute.{call.data.tool_name}",
            context=parent,
            attributes=attributes,
            start_time=started_ns,
        )
        span.set_status(Status(StatusCode.OK if outcome.success else StatusCode.ERROR))
        span.end(end_time=ended)
