"""Metric labels stay bounded: the tenant label's cap, route templates, tool names."""

from __future__ import annotations

from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

from fastapi import FastAPI
from fastapi.responses import StreamingResponse
from fastapi.testclient import TestClient
from prometheus_client import REGISTRY
from weft_platform import http_metrics
from weft_platform.http_metrics import HttpMetrics
from weft_platform.metrics import OTHER, BoundedLabel
from weft_tool_catalog import ToolRegistry


def test_tenant_label_is_empty_unless_enabled() -> None:
    assert BoundedLabel(enabled=False).label("tenant-a") == ""


def test_tenant_label_caps_distinct_values() -> None:
    labels = BoundedLabel(enabled=True, cap=3)
    seen = {labels.label(f"tenant-{i}") for i in range(100)}
    assert seen == {"tenant-0", "tenant-1", "tenant-2", OTHER}
    assert labels.label("tenant-1") == "tenant-1"  # a counted tenant keeps its label


def _count(route: str, status: str) -> float:
    value = REGISTRY.get_sample_value(
        "weft_http_requests_total", {"method": "GET", "route": route, "status": status}
    )
    return value or 0.0


def test_http_requests_are_labelled_by_route_template_never_the_raw_path() -> None:
    app = FastAPI()

    @app.get("/things/{thing_id}")
    async def thing(thing_id: str) -> dict[str, str]:
        return {"id": thing_id}

    app.add_middleware(HttpMetrics)
    before = _count("/things/{thing_id}", "200")
    unmatched = _count("unmatched", "404")
    client = TestClient(app)
    for i in range(5):
        assert client.get(f"/things/secret-{i}").status_code == 200
    assert client.get("/nowhere/secret-x").status_code == 404
    assert _count("/things/{thing_id}", "200") - before == 5
    assert _count("unmatched", "404") - unmatched == 1
    exposed = [
        sample.labels
        for family in REGISTRY.collect()
        for sample in family.samples
        if family.name == "weft_http_requests"
    ]
    assert not any("secret" in value for labels in exposed for value in labels.values())


def test_tool_label_is_a_registered_name_or_a_fixed_word() -> None:
    registry = ToolRegistry()
    assert registry.metric_name("forged-name-123") == "unknown"


def _duration_sum(route: str) -> float:
    value = REGISTRY.get_sample_value(
        "weft_http_request_duration_seconds_sum", {"method": "GET", "route": route}
    )
    return value or 0.0


def test_an_event_streams_duration_is_its_time_to_open(monkeypatch: Any) -> None:
    # A fake clock the handlers move: an SSE stream that lives 120 s counts the 0.5 s it
    # took to open; a plain answer counts until its end. No wall-clock time involved.
    clock = [1000.0]
    monkeypatch.setattr(http_metrics, "time", SimpleNamespace(perf_counter=lambda: clock[0]))
    app = FastAPI()

    async def frames() -> AsyncIterator[bytes]:
        yield b"data: one\n\n"
        clock[0] += 120  # the stream stays open two minutes after it opened
        yield b"data: two\n\n"

    @app.get("/streams/{sid}")
    async def stream(sid: str) -> StreamingResponse:
        clock[0] += 0.5
        return StreamingResponse(frames(), media_type="text/event-stream; charset=utf-8")

    @app.get("/files/{fid}")
    async def download(fid: str) -> StreamingResponse:
        async def body() -> AsyncIterator[bytes]:
            yield b"a"
            clock[0] += 3  # a slow download: its whole length counts
            yield b"b"

        return StreamingResponse(body(), media_type="application/octet-stream")

    app.add_middleware(HttpMetrics)
    client = TestClient(app)
    streams, files = _duration_sum("/streams/{sid}"), _duration_sum("/files/{fid}")
    assert client.get("/streams/s1").text == "data: one\n\ndata: two\n\n"
    assert client.get("/files/f1").content == b"ab"
    assert _duration_sum("/streams/{sid}") - streams == 0.5
    assert _duration_sum("/files/{fid}") - files == 3
