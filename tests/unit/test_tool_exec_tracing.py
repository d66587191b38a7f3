"""The tool worker's span (SPEC E-23): ``tool.execute.<name>`` under the engine's
``agent.tool.<name>``, linked through the call's W3C ``traceparent``."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from weft_contracts import (
    AgentConfig,
    ToolCallCompletedData,
    ToolCallRequested,
    ToolCallRequestedData,
    ToolContext,
)
from weft_engine.state import PendingCall, TurnState
from weft_engine.tracing import TurnTracer, build_provider
from weft_tool_catalog import ToolOutcome
from weft_tool_exec.tracing import WorkerTracer, provider_from_settings

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"


def _call(traceparent: str | None, call_id: str = "c1") -> ToolCallRequested:
    return ToolCallRequested(
        tenant_id="t", session_id="s", request_id="req-1", traceparent=traceparent,
        data=ToolCallRequestedData(
            call_id=call_id, tool_name="thinking", arguments={}, round=0,
            deadline=datetime.now(UTC) + timedelta(seconds=60),
            context=ToolContext(user_id="u", agent_id="a"),
        ),
    )  # fmt: skip


def _worker() -> tuple[WorkerTracer, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return WorkerTracer(provider, "worker-7"), exporter


def _engine_tool_span(traceparent: str) -> tuple[str, ReadableSpan]:
    """The engine's traceparent for call c1 and the ``agent.tool.thinking`` span it writes."""
    exporter = InMemorySpanExporter()
    provider = build_provider(exporter)
    tracer = TurnTracer(provider)
    state = TurnState(
        tenant_id="t", session_id="s", request_id="req-1", user_id="u",
        agent=AgentConfig(agent_id="a", model="m"), messages=[], started_at=time.time(),
        traceparent=traceparent,
        pending=[PendingCall(call_id="c1", tool_name="thinking", arguments={},
                             arguments_json="{}", deadline=time.time() + 59)],
    )  # fmt: skip
    sent = tracer.tool_traceparent(state, "c1")
    assert sent is not None
    tracer.tool_done(state, ToolCallCompletedData(call_id="c1", tool_name="thinking", success=True))
    provider.force_flush()
    (span,) = exporter.get_finished_spans()
    return sent, span


def test_worker_span_is_a_child_of_the_engine_tool_span() -> None:
    """SPEC E-23: same trace, parent = the engine's agent.tool.<name> span; attributes
    name the tool, the worker, the duration and the error flag."""
    sent, engine_span = _engine_tool_span(f"00-{TRACE_ID}-00f067aa0ba902b7-01")
    tracer, exporter = _worker()
    started = time.time_ns() - 5_000_000
    tracer.call_done(_call(sent), ToolOutcome(success=True, output="ok"), started)
    (span,) = exporter.get_finished_spans()
    assert span.name == "tool.execute.thinking"
    assert engine_span.context is not None and span.context is not None
    assert span.context.trace_id == engine_span.context.trace_id == int(TRACE_ID, 16)
    assert span.parent is not None and span.parent.span_id == engine_span.context.span_id
    attributes = dict(span.attributes or {})
    assert attributes["weft.tool.name"] == "thinking"
    assert attributes["weft.worker"] == "worker-7"
    assert attributes["weft.tool.error"] is False
    duration = attributes["weft.tool.duration_ms"]
    assert isinstance(duration, int) and duration >= 5
    assert span.start_time == started and span.status.status_code == StatusCode.OK


def test_failed_call_is_an_error_span_and_a_call_without_trace_a_root() -> None:
    """SPEC E-23: a failed tool marks the span as an error with its message; a call the
    engine sent without a traceparent (its tracing off) gets a root span."""
    tracer, exporter = _worker()
    failed = ToolOutcome(success=False, error="thinking: bad arguments")
    tracer.call_done(_call(None), failed, time.time_ns())
    (span,) = exporter.get_finished_spans()
    assert span.parent is None and span.status.status_code == StatusCode.ERROR
    attributes = dict(span.attributes or {})
    assert attributes["weft.tool.error"] is True
    assert attributes["weft.tool.error_message"] == "thinking: bad arguments"


def test_exporter_none_writes_nothing() -> None:
    """SPEC E-23: WEFT_TRACING_EXPORTER=none builds no provider; the tracer is a no-op."""
    assert provider_from_settings("none", "w") is None
    tracer = WorkerTracer(None, "w")
    assert not tracer.enabled
    tracer.call_done(_call(None), ToolOutcome(success=True), time.time_ns())
    console = provider_from_settings("console", "w")
    assert console is not None
    assert console.resource.attributes["service.name"] == "weft-tool-exec"
    assert console.resource.attributes["service.instance.id"] == "w"
    console.shutdown()


def test_a_call_of_a_turn_sampled_out_writes_no_span() -> None:
    tracer, exporter = _worker()
    unsampled = f"00-{TRACE_ID}-00f067aa0ba902b7-00"
    tracer.call_done(_call(unsampled), ToolOutcome(success=True, output="ok"), time.time_ns())
    assert exporter.get_finished_spans() == ()
