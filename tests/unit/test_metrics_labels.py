"""Metric labels stay bounded: the tenant label's cap, route templates, tool names."""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.testclient import TestClient
from prometheus_client import REGISTRY
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
