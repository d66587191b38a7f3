"""A real tool-exec worker over Kafka exports its spans over OTLP (SPEC E-23).

The worker runs as an OS process with ``WEFT_TRACING_EXPORTER=otlp``; its OTLP/HTTP
exporter posts to a small collector in this test, which decodes the protobuf requests.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from weft_testkit.tool_workers import ToolCallClient, ToolWorkerPool

LOG_DIR = Path(".weft/logs/e2e")
THINK = {"thought": "t", "next_thought_needed": False, "thought_number": 1, "total_thoughts": 1}
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_SPAN = "00f067aa0ba902b7"


class _Collector(BaseHTTPRequestHandler):
    """OTLP/HTTP trace receiver: keeps every span with its resource attributes."""

    spans: list[dict[str, Any]] = []
    arrived = threading.Condition()

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        request = ExportTraceServiceRequest.FromString(body)
        for resource_spans in request.resource_spans:
            resource = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
            for scope in resource_spans.scope_spans:
                for span in scope.spans:
                    attributes = {a.key: _value(a.value) for a in span.attributes}
                    with _Collector.arrived:
                        _Collector.spans.append(
                            {
                                "name": span.name,
                                "trace_id": span.trace_id.hex(),
                                "parent": span.parent_span_id.hex(),
                                "attributes": attributes,
                                "error": span.status.code == 2,
                                "service": resource.get("service.name"),
                            }
                        )
                        _Collector.arrived.notify_all()
        answer = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args: object) -> None:
        pass


def _value(value: Any) -> Any:
    kind = value.WhichOneof("value")
    return getattr(value, kind) if kind else None


@pytest.fixture
def collector() -> Iterator[int]:
    _Collector.spans = []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Collector)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield httpd.server_address[1]
    httpd.shutdown()


@pytest.fixture
def pool(infra: dict[str, str], collector: int) -> Iterator[ToolWorkerPool]:
    env = {
        "WEFT_TOOL_CONCURRENCY": "1",
        "WEFT_TRACING_EXPORTER": "otlp",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"http://127.0.0.1:{collector}/v1/traces",
        "OTEL_BSP_SCHEDULE_DELAY": "100",
    }
    workers = ToolWorkerPool(LOG_DIR, partitions=1, extra_env=env)
    yield workers
    workers.stop()


def _executions() -> list[dict[str, Any]]:
    return [s for s in _Collector.spans if s["name"].startswith("tool.execute.")]


def _wait_for_spans(count: int) -> list[dict[str, Any]]:
    """Every span exported once ``count`` tool.execute spans are there (the worker also
    writes a consumer span per record, weft_platform.tracing)."""
    with _Collector.arrived:
        got = _Collector.arrived.wait_for(lambda: len(_executions()) >= count, timeout=60)
        assert got, f"{len(_executions())} tool.execute span(s) exported, {count} expected"
        return list(_Collector.spans)


async def _spans(count: int) -> list[dict[str, Any]]:
    return await asyncio.to_thread(_wait_for_spans, count)


async def test_worker_spans_join_the_engine_trace(pool: ToolWorkerPool) -> None:
    """SPEC E-23: each call gets tool.execute.<name> under the span named by its
    traceparent (the engine's agent.tool span), with the worker id and error flag."""
    pool.start("worker-t")
    traceparent = f"00-{TRACE_ID}-{PARENT_SPAN}-01"
    async with ToolCallClient(pool.prefix) as client:
        ok = await client.send("thinking", THINK, traceparent=traceparent)
        bad = await client.send("thinking", {"thought": 3}, traceparent=traceparent)
        await client.wait_for([ok, bad], timeout_s=120)
    assert client.results[ok][0]["success"] and not client.results[bad][0]["success"]
    exported = await _spans(2)
    spans = {
        s["attributes"]["weft.tool.call_id"]: s
        for s in exported
        if s["name"].startswith("tool.execute.")
    }
    consumed = [s for s in exported if s["name"].endswith("tool.calls.v1 process")]
    assert consumed and all(
        (s["trace_id"], s["parent"]) == (TRACE_ID, PARENT_SPAN) for s in consumed
    ), consumed
    for call_id, failed in ((ok, False), (bad, True)):
        span = spans[call_id]
        assert span["name"] == "tool.execute.thinking"
        assert (span["trace_id"], span["parent"]) == (TRACE_ID, PARENT_SPAN)
        assert span["service"] == "weft-tool-exec"
        assert span["attributes"]["weft.worker"] == "worker-t"
        assert span["attributes"]["weft.tool.error"] is failed and span["error"] is failed
        assert span["attributes"]["weft.tool.duration_ms"] >= 0
