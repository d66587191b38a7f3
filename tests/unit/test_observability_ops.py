"""Offline checks of what an operator deploys for observability (docs/observability.md):
the Grafana dashboard JSON, the Prometheus alert rules and their unit tests, and the chart's
ServiceMonitor, PodMonitor and PrometheusRule.

Grafana is not installed here: the dashboard is built and read back with
grafana-foundation-sdk (generated from Grafana's schema), and its queries are parsed by
Debian's promtool 2.42 (the PromQL Prometheus 2.42 accepts). promtool comes from
deploy/local/bootstrap.sh; without it these tests fail rather than skip.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml
from grafana_foundation_sdk.models.dashboard import Dashboard, Panel, RowPanel

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "deploy" / "grafana" / "weft-dashboard.json"
BUILDER = REPO / "deploy" / "grafana" / "build_dashboard.py"
ALERTS = REPO / "deploy" / "prometheus" / "alerts.yml"
ALERT_TESTS = REPO / "deploy" / "prometheus" / "tests" / "alerts_test.yml"
CHART = REPO / "helm" / "weft"
CHART_ALERTS = CHART / "files" / "prometheus-alerts.yml"
RATE_INTERVAL = "1m"
"""What Grafana's ``$__rate_interval`` stands for when a query is checked outside Grafana."""


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.fail(
            f"`{name}` not found: run deploy/local/bootstrap.sh (Debian package prometheus)"
        )
    return path


def _helm() -> str:
    found = shutil.which("helm")
    cached = Path(os.environ.get("HOME", str(Path.home()))) / ".cache" / "weft" / "bin" / "helm"
    if found is None and not cached.is_file():
        pytest.fail("helm not found: deploy/local/ensure-helm.sh installs it")
    return found or str(cached)


def _builder() -> ModuleType:
    spec = importlib.util.spec_from_file_location("weft_build_dashboard", BUILDER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def dashboard_queries() -> list[tuple[str, str]]:
    """(panel title, PromQL) of every target of the committed dashboard."""
    board = json.loads(DASHBOARD.read_text())
    return [
        (p["title"], t["expr"]) for p in board["panels"] if p["type"] != "row" for t in p["targets"]
    ]


def alert_rules() -> list[dict[str, Any]]:
    """Every rule of deploy/prometheus/alerts.yml."""
    groups = yaml.safe_load(ALERTS.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


def test_dashboard_json_is_what_the_builder_makes() -> None:
    assert DASHBOARD.read_text() == _builder().render(), (
        "deploy/grafana/weft-dashboard.json is stale: run "
        ".venv/bin/python deploy/grafana/build_dashboard.py"
    )


def test_dashboard_loads_into_grafanas_model() -> None:
    board = Dashboard.from_json(json.loads(DASHBOARD.read_text()))
    assert board.uid == "weft-overview" and board.title == "Weft"
    panels = board.panels or []
    ids = [p.id_val for p in panels]
    assert None not in ids and len(set(ids)) == len(ids), f"panel ids must be unique: {ids}"
    rows = [p.title for p in panels if isinstance(p, RowPanel)]
    assert rows == ["Turns", "LLM", "Tools", "Kafka", "HTTP and SSE", "Capacity and limits",
                    "Processes"]  # fmt: skip
    for p in panels:
        if isinstance(p, Panel):
            assert p.type_val == "timeseries" and p.targets, p.title
            assert p.datasource is not None and p.datasource.uid == "${datasource}", p.title
            assert p.grid_pos is not None and p.grid_pos.x + p.grid_pos.w <= 24, p.title


def test_dashboard_covers_every_area_of_the_issue() -> None:
    exprs = " ".join(e for _, e in dashboard_queries())
    wanted = (
        "weft_turns_started_total", "weft_turn_duration_seconds_bucket",
        "weft_kafka_consumer_lag", "weft_http_requests_total", "weft_dead_letters_total",
        "weft_sse_connections", "weft_tool_calls_total",
        "weft_llm_time_to_first_token_seconds_bucket",
    )  # fmt: skip
    for metric in wanted:
        assert metric in exprs, metric


def _promql_as_rules(exprs: list[str], path: Path) -> None:
    rules = [
        {
            "record": f"weft:dashboard_query_{i}",
            "expr": e.replace("$__rate_interval", RATE_INTERVAL),
        }
        for i, e in enumerate(exprs)
    ]
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))


def test_dashboard_queries_parse_in_prometheus_2_42(tmp_path: Path) -> None:
    """promtool parses each query as a recording rule: PromQL newer than 2.42 fails here."""
    rules = tmp_path / "dashboard-queries.yml"
    _promql_as_rules([e for _, e in dashboard_queries()], rules)
    result = subprocess.run([_tool("promtool"), "check", "rules", str(rules)],
                            capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr


def test_alert_rules_check_and_their_unit_tests_pass() -> None:
    promtool = _tool("promtool")
    checked = subprocess.run([promtool, "check", "rules", str(ALERTS)],
                             capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = subprocess.run([promtool, "test", "rules", str(ALERT_TESTS)],
                            capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_every_alert_has_a_unit_test_a_severity_and_a_runbook_section() -> None:
    tests_text = ALERT_TESTS.read_text()
    docs = (REPO / "docs" / "observability.md").read_text().lower()
    for rule in alert_rules():
        name = rule["alert"]
        assert f"alertname: {name}\n" in tests_text, f"{name} has no promtool test"
        assert rule["labels"]["severity"] in ("info", "warning", "critical"), name
        anchor = rule["annotations"]["runbook"].split("#")[1]
        assert anchor == name.lower(), name
        assert f"### {name.lower()}" in docs, f"docs/observability.md has no section {name}"


METRIC = re.compile(r"\b(weft_[a-z_]+)")
SUFFIXES = ("_total", "_bucket", "_count", "_sum")


def _catalog_names() -> set[str]:
    from prometheus_client import REGISTRY
    from weft_platform import metrics  # noqa: F401 (registers the catalog)

    names = set()
    for family in REGISTRY.collect():
        if family.name.startswith("weft_"):
            names.add(family.name)
    return names


def test_dashboard_and_alerts_use_only_catalog_metrics() -> None:
    """A renamed metric must fail here, not leave a panel empty in production."""
    catalog = _catalog_names()
    used = {m for _, e in dashboard_queries() for m in METRIC.findall(e)}
    used |= {m for r in alert_rules() for m in METRIC.findall(r["expr"])}
    unknown = sorted(
        m
        for m in used
        if m not in catalog
        and not any(m.endswith(s) and m.removesuffix(s) in catalog for s in SUFFIXES)
    )
    assert not unknown, f"not in weft_platform.metrics: {unknown}"


# --- chart ------------------------------------------------------------------------------


def _render(*sets: str) -> list[dict[str, Any]]:
    args = [_helm(), "template", "weft", str(CHART), "--namespace", "agents",
            "-f", str(CHART / "ci" / "test-double-values.yaml")]  # fmt: skip
    for s in sets:
        args += ["--set", s]
    result = subprocess.run(args, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    return [d for d in yaml.safe_load_all(result.stdout) if d]


def _monitoring(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {d["kind"]: d for d in docs if d["apiVersion"] == "monitoring.coreos.com/v1"}


def test_chart_alerts_are_a_copy_of_deploy_prometheus_alerts() -> None:
    assert CHART_ALERTS.read_text() == ALERTS.read_text(), (
        "cp deploy/prometheus/alerts.yml helm/weft/files/prometheus-alerts.yml"
    )


def test_chart_renders_no_monitoring_objects_by_default() -> None:
    assert _monitoring(_render()) == {}


def test_chart_renders_monitors_and_rules_when_enabled() -> None:
    docs = _render(
        "metrics.serviceMonitor.enabled=true",
        "metrics.prometheusRule.enabled=true",
        "metrics.serviceMonitor.labels.release=kps",
        "metrics.serviceMonitor.interval=15s",
    )
    objs = _monitoring(docs)
    assert set(objs) == {"ServiceMonitor", "PodMonitor", "PrometheusRule"}
    monitor, pods, rule = objs["ServiceMonitor"], objs["PodMonitor"], objs["PrometheusRule"]
    assert monitor["metadata"]["labels"]["release"] == "kps"
    spec = monitor["spec"]
    assert spec["jobLabel"] == "app.kubernetes.io/component"
    assert spec["namespaceSelector"] == {"matchNames": ["agents"]}
    assert spec["endpoints"] == [
        {"port": "metrics", "path": "/metrics", "interval": "15s", "scrapeTimeout": "10s"}
    ]
    # Every Service it selects by label is one of the release's (the test double excepted).
    selector = spec["selector"]["matchLabels"]
    services = [d for d in docs if d["kind"] == "Service"]
    selected = {
        s["metadata"]["labels"]["app.kubernetes.io/component"]
        for s in services
        if selector.items() <= s["metadata"]["labels"].items()
    }
    assert {"gateway", "engine", "tool-exec", "memory"} <= selected
    assert spec["selector"]["matchExpressions"] == [
        {"key": "app.kubernetes.io/component", "operator": "NotIn", "values": ["scripted-llm"]}
    ]
    # The projector and the ingestion workers have no Service: a PodMonitor scrapes them.
    assert pods["spec"]["selector"]["matchExpressions"] == [
        {
            "key": "app.kubernetes.io/component",
            "operator": "In",
            "values": ["gateway-projector", "knowledge-worker"],
        }
    ]
    assert pods["spec"]["podMetricsEndpoints"][0]["port"] == "metrics"
    assert rule["spec"]["groups"] == yaml.safe_load(ALERTS.read_text())["groups"]


def test_chart_drops_the_pod_monitor_without_service_less_components() -> None:
    docs = _render(
        "metrics.serviceMonitor.enabled=true",
        "services.gateway-projector.enabled=false",
        "services.knowledge-worker.enabled=false",
    )
    assert set(_monitoring(docs)) == {"ServiceMonitor"}
    docs = _render(
        "metrics.serviceMonitor.enabled=true", "services.gateway-projector.enabled=false"
    )
    (pods,) = [d for d in docs if d["kind"] == "PodMonitor"]
    assert pods["spec"]["selector"]["matchExpressions"][0]["values"] == ["knowledge-worker"]


def test_the_target_down_alert_names_every_component_with_a_metrics_port() -> None:
    """A component added to the chart (knowledge, its ingestion workers) is paged for when
    Prometheus cannot scrape it: the alert's job list is the chart's scraped components."""
    docs = _render("metrics.serviceMonitor.enabled=true")
    scraped = {
        d["metadata"]["labels"]["app.kubernetes.io/component"]
        for d in docs
        if d["kind"] == "Deployment"
        and any(
            p["name"] == "metrics"
            for c in d["spec"]["template"]["spec"]["containers"]
            for p in c.get("ports", [])
        )
    }
    assert {"gateway-projector", "knowledge", "knowledge-worker"} <= scraped, scraped
    (rule,) = [r for r in alert_rules() if r["alert"] == "WeftMetricsTargetDown"]
    jobs = re.fullmatch(r'up\{job=~"([a-z|-]+)"\} == 0', rule["expr"].strip())
    assert jobs is not None, rule["expr"]
    assert set(jobs.group(1).split("|")) == scraped
