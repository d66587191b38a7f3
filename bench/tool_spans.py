"""What a tool-exec worker's span costs per call (SPEC E-23): ``WorkerTracer.call_done``
with tracing off (``WEFT_TRACING_EXPORTER=none``) and on (batch processor, in-memory
exporter: the span work without network). Writes ``bench/results/tool_spans.json``.

    .venv/bin/python bench/tool_spans.py --seconds 1
"""

from __future__ import annotations

import argparse
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from benchlib import machine, save
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from weft_contracts import ToolCallRequested, ToolCallRequestedData, ToolContext
from weft_tool_catalog import ToolOutcome
from weft_tool_exec.tracing import WorkerTracer

CALL = ToolCallRequested(
    tenant_id="t", session_id="s", request_id="r",
    traceparent="00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
    data=ToolCallRequestedData(
        call_id="c1", tool_name="thinking", arguments={}, round=0,
        deadline=datetime.now(UTC) + timedelta(seconds=60),
        context=ToolContext(user_id="u", agent_id="a"),
    ),
)  # fmt: skip
OUTCOME = ToolOutcome(success=True, output="ok")


def _rate(tracer: WorkerTracer, seconds: float) -> dict[str, float]:
    calls, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        tracer.call_done(CALL, OUTCOME, time.time_ns())
        calls += 1
    elapsed = time.perf_counter() - started
    return {"calls_per_s": round(calls / elapsed), "us_per_call": round(elapsed / calls * 1e6, 2)}


def run(seconds: float) -> dict[str, Any]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(exporter, max_queue_size=1_000_000))
    result: dict[str, Any] = {
        "bench": "tool_spans",
        "exporter_none": _rate(WorkerTracer(None, "w"), seconds),
        "exporter_in_memory": _rate(WorkerTracer(provider, "w"), seconds),
    }
    provider.shutdown()
    result.update(machine())
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=1.0)
    result = run(parser.parse_args().seconds)
    save("tool_spans", result)


if __name__ == "__main__":
    main()
