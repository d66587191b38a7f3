"""The platform's tracing and request logs: spans per request and consumed record, the
``traceparent`` carried on envelopes and internal calls, log lines bound to the trace,
tenant and request, and an access line that never holds the query string or a key."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import structlog
from fastapi import FastAPI
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags
from weft_contracts import Envelope
from weft_platform import tracing
from weft_platform.bus import _traced
from weft_platform.http_tracing import TracingMiddleware
from weft_platform.logs import configure_logging

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = "00f067aa0ba902b7"
KEY = "wk_live_SECRETKEY123"


@pytest.fixture
def spans(monkeypatch: pytest.MonkeyPatch) -> Iterator[InMemorySpanExporter]:
    """The platform's spans go to memory, every new trace sampled."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=tracing.ratio_sampler(1.0))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(tracing, "tracer", lambda: provider.get_tracer("test"))
    yield exporter
    provider.shutdown()


@pytest.fixture
def json_logs() -> Iterator[None]:
    """The root handlers are put back after the test (which logs JSON to its captured
    stdout), so no later test logs to this test's closed capture."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def _lines(out: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def _app() -> FastAPI:
    app = FastAPI(telemetry={"tracing": False})  # as create_service_app builds it
    log = structlog.get_logger("test")

    @app.get("/v1/things/{thing_id}")
    async def thing(thing_id: str) -> dict[str, str]:
        structlog.contextvars.bind_contextvars(tenant_id="tenant-a")  # as the gateway's auth
        log.info("inside_handler")
        return {"id": thing_id, "traceparent": tracing.current_traceparent() or ""}

    return app


async def _get(app: Any, url: str, headers: dict[str, str] | None = None) -> httpx.Response:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        return await client.get(url, headers=headers)


async def test_access_line_names_the_route_template_never_the_query_or_a_key(
    spans: InMemorySpanExporter, capsys: pytest.CaptureFixture[str], json_logs: None
) -> None:
    configure_logging("test", fmt="json")
    app = TracingMiddleware(_app(), access_log=True, trust_incoming=False)
    resp = await _get(
        app,
        f"/v1/things/thing-77?api_key={KEY}&token={KEY}",
        {"Authorization": f"Bearer {KEY}", "X-API-Key": KEY},
    )
    assert resp.status_code == 200
    out = capsys.readouterr().out
    assert KEY not in out and "thing-77" not in out and "api_key" not in out
    access = [line for line in _lines(out) if line["event"] == "http_request"]
    assert len(access) == 1, out
    assert access[0]["method"] == "GET" and access[0]["status"] == 200
    assert access[0]["route"] == "/v1/things/{thing_id}"
    assert isinstance(access[0]["duration_ms"], float)
    (span,) = spans.get_finished_spans()
    assert span.name == "GET /v1/things/{thing_id}"
    assert KEY not in json.dumps(dict(span.attributes or {}))


async def test_every_line_of_a_request_carries_its_trace_tenant_and_request(
    spans: InMemorySpanExporter, capsys: pytest.CaptureFixture[str], json_logs: None
) -> None:
    configure_logging("test", fmt="json")
    app = TracingMiddleware(_app(), access_log=True, trust_incoming=False)
    await _get(app, "/v1/things/x")
    lines = _lines(capsys.readouterr().out)
    (span,) = spans.get_finished_spans()
    trace_id = f"{span.context.trace_id:032x}"
    assert {line["event"] for line in lines} == {"inside_handler", "http_request"}
    for line in lines:
        assert line["trace_id"] == trace_id
        assert line["tenant_id"] == "tenant-a"
        assert line["request_id"].startswith("http_")


async def test_the_public_side_starts_a_trace_an_internal_one_continues_it(
    spans: InMemorySpanExporter,
) -> None:
    incoming = {
        "traceparent": f"00-{TRACE}-{PARENT}-01",
        "x-weft-request-id": "req_turn",
        "x-weft-tenant-id": "tenant-b",
    }
    public = await _get(TracingMiddleware(_app(), access_log=False, trust_incoming=False),
                        "/v1/things/x", incoming)  # fmt: skip
    internal = await _get(TracingMiddleware(_app(), access_log=False, trust_incoming=True),
                          "/v1/things/x", incoming)  # fmt: skip
    assert TRACE not in public.json()["traceparent"]
    assert internal.json()["traceparent"].startswith(f"00-{TRACE}-")
    public_span, internal_span = spans.get_finished_spans()
    assert public_span.parent is None
    assert internal_span.parent is not None and f"{internal_span.parent.span_id:016x}" == PARENT


async def test_an_unmatched_path_is_logged_as_unmatched(
    spans: InMemorySpanExporter, capsys: pytest.CaptureFixture[str], json_logs: None
) -> None:
    configure_logging("test", fmt="json")
    app = TracingMiddleware(_app(), access_log=True, trust_incoming=False)
    resp = await _get(app, f"/v1/{KEY}/nothing?key={KEY}")
    assert resp.status_code == 404
    out = capsys.readouterr().out
    assert KEY not in out
    (access,) = [line for line in _lines(out) if line["event"] == "http_request"]
    assert access["route"] == "unmatched" and access["status"] == 404


def _request(traceparent: str | None = None) -> Envelope:
    return Envelope(tenant_id="t1", session_id="s1", request_id="req_1", traceparent=traceparent)


def test_a_published_envelope_carries_the_current_trace_unless_it_has_one() -> None:
    assert _traced(_request()).traceparent is None  # outside any span
    context = SpanContext(int(TRACE, 16), int(PARENT, 16), False, TraceFlags(0x01))
    with trace.use_span(NonRecordingSpan(context)):
        assert _traced(_request()).traceparent == f"00-{TRACE}-{PARENT}-01"
        kept = f"00-{TRACE}-{'1' * 16}-00"
        assert _traced(_request(kept)).traceparent == kept


def test_a_consumer_continues_the_envelopes_trace_and_binds_its_ids(
    spans: InMemorySpanExporter,
) -> None:
    message = _request(f"00-{TRACE}-{PARENT}-01")
    with tracing.consuming("agent.requests", message):
        bound = structlog.contextvars.get_contextvars()
    assert bound["trace_id"] == TRACE
    assert (bound["tenant_id"], bound["request_id"]) == ("t1", "req_1")
    assert "trace_id" not in structlog.contextvars.get_contextvars()
    (span,) = spans.get_finished_spans()
    assert span.kind == trace.SpanKind.CONSUMER
    assert span.parent is not None and f"{span.parent.span_id:016x}" == PARENT


async def test_an_internal_call_sends_the_trace_and_the_log_context() -> None:
    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200)

    transport = httpx.MockTransport(answer)
    hooks = dict(tracing.propagation_hooks())
    async with httpx.AsyncClient(transport=transport, event_hooks=hooks) as client:
        context = SpanContext(int(TRACE, 16), int(PARENT, 16), False, TraceFlags(0x01))
        with (
            trace.use_span(NonRecordingSpan(context)),
            structlog.contextvars.bound_contextvars(request_id="req_9", tenant_id="t9"),
        ):
            await client.get("http://memory/x")
        await client.get("http://memory/y")
    assert seen[0].headers["traceparent"] == f"00-{TRACE}-{PARENT}-01"
    assert seen[0].headers["x-weft-request-id"] == "req_9"
    assert seen[0].headers["x-weft-tenant-id"] == "t9"
    assert "traceparent" not in seen[1].headers


def test_the_sampler_follows_the_parent_and_samples_new_traces_by_ratio() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=tracing.ratio_sampler(0.0))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("t")
    with tracer.start_as_current_span("new") as span:
        assert not span.is_recording()
        assert span.get_span_context().is_valid  # ids still made: logs and propagation
    for flags, recorded in ((0x01, True), (0x00, False)):
        parent = tracing.parent_context(f"00-{TRACE}-{PARENT}-{flags:02x}")
        with tracer.start_as_current_span("continued", context=parent) as span:
            assert span.is_recording() is recorded
    assert [s.name for s in exporter.get_finished_spans()] == ["continued"]


def test_the_gateway_logs_access_and_trusts_no_client_trace_by_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from weft_gateway.settings import GatewaySettings
    from weft_platform.settings import ServiceSettings

    for name in ("WEFT_ACCESS_LOG", "WEFT_TRACING_TRUST_INCOMING", "WEFT_TRACING_EXPORTER",
                 "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):  # fmt: skip
        monkeypatch.delenv(name, raising=False)
    gateway, internal = GatewaySettings(), ServiceSettings()
    assert (gateway.access_log, gateway.tracing_trust_incoming) == (True, False)
    assert (internal.access_log, internal.tracing_trust_incoming) == (False, True)
    assert (internal.tracing_exporter, internal.tracing_sample_ratio) == ("none", 0.1)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318")
    assert ServiceSettings().tracing_exporter == "otlp"
    monkeypatch.setenv("WEFT_TRACING_EXPORTER", "none")
    assert ServiceSettings().tracing_exporter == "none"


async def test_tool_exec_calls_to_weft_services_carry_the_trace() -> None:
    """issue 37: tool-exec's own calls (memory's search routes, agent-config's MCP
    catalog) continue the call's trace, like every other internal client."""
    import httpx
    from opentelemetry import trace as otel
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags
    from weft_platform.tracing import propagation_hooks
    from weft_tools.mcp_directory import HttpMcpDirectory
    from weft_tools.memory_tools import MemoryServiceClient

    seen: list[str | None] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("traceparent"))
        if request.url.path == "/internal/mcp/catalog":
            return httpx.Response(200, json={"servers": []})
        return httpx.Response(200, json={"memories": []})

    transport = httpx.MockTransport(answer)
    parent = SpanContext(0xABC, 0xDEF, is_remote=True, trace_flags=TraceFlags(1))
    with otel.use_span(NonRecordingSpan(parent)):
        memory = MemoryServiceClient("http://memory", transport=transport,
                                     event_hooks=propagation_hooks())  # fmt: skip
        await memory.get("/internal/memories/search", {"query": "x"}, "cred")
        directory = HttpMcpDirectory("http://agent-config", transport=transport,
                                     event_hooks=propagation_hooks())  # fmt: skip
        await directory.catalog(["srv"], refresh=False, credential="cred")
    expected = f"00-{0xABC:032x}-{0xDEF:016x}-01"
    assert seen == [expected, expected]


def test_a_batch_gives_each_sampled_record_its_own_consumer_span(
    spans: InMemorySpanExporter,
) -> None:
    """The projector and suggestions read batches: a sampled turn's trace still shows them
    (one CONSUMER span per sampled record, child of its envelope); unsampled records and
    records without a trace make none."""
    sampled = _request(f"00-{TRACE}-{PARENT}-01")
    unsampled = _request(f"00-{TRACE}-{PARENT}-00")
    untraced = _request(None)
    with tracing.consuming_batch("agent.events", [sampled, unsampled, untraced]):
        assert spans.get_finished_spans() == (), "open while the batch is handled"
    (span,) = spans.get_finished_spans()
    assert span.kind == trace.SpanKind.CONSUMER
    assert span.parent is not None and f"{span.parent.span_id:016x}" == PARENT
