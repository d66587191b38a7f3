"""Build deploy/grafana/weft-dashboard.json with grafana-foundation-sdk (docs/observability.md).

Grafana itself is not installed anywhere in this repository's CI: the library's builders
and models give the JSON Grafana's own shape (the SDK is generated from Grafana's schema),
tests/unit/test_observability_ops.py checks that the committed file is what this script
builds and loads back into the SDK's models, and tests/e2e/test_prometheus_scrape.py runs
every query against a real Prometheus scraping a test stack.

    .venv/bin/python deploy/grafana/build_dashboard.py          # rewrite the JSON
    .venv/bin/python deploy/grafana/build_dashboard.py --check  # exit 1 when out of date

Queries group by ``job``: the chart's ServiceMonitor and PodMonitor set it to the
component name (gateway, engine, ...), as the local scrape configuration does.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from grafana_foundation_sdk.builders import dashboard, prometheus, timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.dashboard import DataSourceRef

OUT = Path(__file__).resolve().parent / "weft-dashboard.json"
UID = "weft-overview"
DATASOURCE = DataSourceRef(type_val="prometheus", uid="${datasource}")
RATE = "$__rate_interval"


@dataclass(frozen=True)
class Query:
    """One PromQL target of a panel and its legend."""

    expr: str
    legend: str


@dataclass(frozen=True)
class Graph:
    """A time-series panel: its title, what it shows, its unit and its queries."""

    title: str
    description: str
    unit: str
    queries: tuple[Query, ...]


def p95(metric: str, by: str) -> str:
    """The 95th percentile of histogram ``metric`` per ``by`` labels."""
    return f"histogram_quantile(0.95, sum by (le, {by}) (rate({metric}_bucket[{RATE}])))"


def p50(metric: str, by: str) -> str:
    """The median of histogram ``metric`` per ``by`` labels."""
    return f"histogram_quantile(0.5, sum by (le, {by}) (rate({metric}_bucket[{RATE}])))"


def rate(metric: str, by: str, selector: str = "") -> str:
    """Per-second rate of counter ``metric`` summed per ``by`` labels."""
    matcher = f"{{{selector}}}" if selector else ""
    return f"sum by ({by}) (rate({metric}{matcher}[{RATE}]))"


HTTP_ALL = rate("weft_http_requests_total", "job")
HTTP_5XX = rate("weft_http_requests_total", "job", 'status=~"5.."')

ROWS: dict[str, tuple[Graph, ...]] = {
    "Turns": (
        Graph("Turns started", "Turns the engine started per second, by agent mode.", "ops",
              (Query(rate("weft_turns_started_total", "mode"), "{{mode}}"),)),
        Graph("Turns ended", "Turns ended per second, by status and end reason (SPEC E-20).",
              "ops",
              (Query(rate("weft_turns_ended_total", "status, reason"), "{{status}} {{reason}}"),)),
        Graph("Turn duration", "Wall time of a turn, request to complete event.", "s",
              (Query(p50("weft_turn_duration_seconds", "status"), "p50 {{status}}"),
               Query(p95("weft_turn_duration_seconds", "status"), "p95 {{status}}"))),
        Graph("Rounds", "Rounds per second and the p95 of a round's model call.", "short",
              (Query("sum(rate(weft_rounds_total[$__rate_interval]))", "rounds/s"),
               Query(p95("weft_round_duration_seconds", "job"), "p95 round (s)"))),
    ),
    "LLM": (
        Graph("LLM request duration", "p95 of a model request, by model.", "s",
              (Query(p95("weft_llm_request_duration_seconds", "model"), "{{model}}"),)),
        Graph("Time to first token", "p50 and p95 of the first streamed token.", "s",
              (Query(p50("weft_llm_time_to_first_token_seconds", "model"), "p50 {{model}}"),
               Query(p95("weft_llm_time_to_first_token_seconds", "model"), "p95 {{model}}"))),
        Graph("Tokens", "Tokens per second the provider counted, by model and kind.", "short",
              (Query(rate("weft_llm_tokens_total", "model, kind"), "{{model}} {{kind}}"),)),
        Graph("LLM errors", "Failed model requests per second, by model and reason.", "ops",
              (Query(rate("weft_llm_errors_total", "model, reason"), "{{model}} {{reason}}"),)),
    ),
    "Tools": (
        Graph("Tool calls", "Tool calls per second, by tool and outcome.", "ops",
              (Query(rate("weft_tool_calls_total", "tool, outcome"), "{{tool}} {{outcome}}"),)),
        Graph("Tool call duration", "p95 of a tool call's execution, by tool.", "s",
              (Query(p95("weft_tool_call_duration_seconds", "tool"), "{{tool}}"),)),
    ),
    "Kafka": (
        Graph("Consumer lag", "Records not yet handled, per consumer group and topic "
              "(each consumer's own view, summed over partitions).", "short",
              (Query("sum by (group, topic) (weft_kafka_consumer_lag)", "{{group}} {{topic}}"),)),
        Graph("Dead letters", "Records dead-lettered per second, by source topic and reason.",
              "ops",
              (Query(rate("weft_dead_letters_total", "topic, reason"), "{{topic}} {{reason}}"),)),
    ),
    "HTTP and SSE": (
        Graph("HTTP requests", "Requests answered per second, by service and status.", "reqps",
              (Query(rate("weft_http_requests_total", "job, status"), "{{job}} {{status}}"),)),
        Graph("HTTP 5xx ratio", "Share of 5xx answers per service (0 when there are none).",
              "percentunit",
              (Query(f"({HTTP_5XX} or {HTTP_ALL} * 0) / {HTTP_ALL}", "{{job}}"),)),
        Graph("HTTP latency", "p95 per service and route template.", "s",
              (Query(p95("weft_http_request_duration_seconds", "job, route"),
                     "{{job}} {{route}}"),)),
        Graph("SSE", "Open SSE streams (all gateways) and the p95 from an event's time to "
              "its frame written to the client.", "short",
              (Query("sum(weft_sse_connections)", "open streams"),
               Query(p95("weft_sse_send_latency_seconds", "job"), "p95 send latency (s)"))),
    ),
    "Capacity and limits": (
        Graph("Ingestion queue",
              "Knowledge documents waiting for ingestion by state, and the wiki generation "
              "and graph extraction jobs after it by queue and state.", "short",
              (Query("max by (state) (weft_ingestion_queue_depth)", "documents {{state}}"),
               Query("max by (queue, state) (weft_knowledge_job_queue_depth)",
                     "{{queue}} {{state}}"))),
        Graph("Sandbox workspaces", "Open session workspaces and their bytes, all replicas.",
              "short",
              (Query("sum(weft_sandbox_workspaces_open)", "open"),
               Query("sum(weft_sandbox_workspace_bytes)", "bytes"))),
        Graph("Budget rejections", "Requests or turns refused per second, by budget scope.",
              "ops",
              (Query(rate("weft_budget_rejections_total", "scope"), "{{scope}}"),)),
        Graph("Approvals", "Tool approval prompts waiting, and decisions per second.", "short",
              (Query("max(weft_approvals_waiting)", "waiting"),
               Query(rate("weft_approval_decisions_total", "outcome"), "{{outcome}}/s"))),
    ),
    "Processes": (
        Graph("CPU", "CPU seconds per second, per service.", "percentunit",
              (Query(rate("process_cpu_seconds_total", "job"), "{{job}}"),)),
        Graph("Memory", "Resident memory per service (sum over its processes).", "bytes",
              (Query("sum by (job) (process_resident_memory_bytes)", "{{job}}"),)),
    ),
}  # fmt: skip


def panel(graph: Graph, panel_id: int) -> timeseries.Panel:
    """The time-series panel of ``graph``, 12 columns wide."""
    built = (
        timeseries.Panel()
        .id(panel_id)
        .title(graph.title)
        .description(graph.description)
        .unit(graph.unit)
        .datasource(DATASOURCE)
        .span(12)
        .height(8)
    )
    for ref, query in zip("ABCDEFGH", graph.queries, strict=False):
        built = built.with_target(
            prometheus.Dataquery().expr(query.expr).legend_format(query.legend).ref_id(ref)
        )
    return built


def build() -> dict[str, object]:
    """The dashboard as Grafana's JSON model."""
    board = (
        dashboard.Dashboard("Weft")
        .uid(UID)
        .description("Weft services: turns, LLM, tools, Kafka lag and dead letters, HTTP, SSE.")
        .tags(["weft"])
        .refresh("30s")
        .time("now-3h", "now")
        .timezone("browser")
        .with_variable(
            dashboard.DatasourceVariable("datasource").label("Data source").type("prometheus")
        )
    )
    # Grafana keys panels by id: number rows and panels in order, from 1.
    panel_id = 0
    for title, graphs in ROWS.items():
        panel_id += 1
        board = board.with_row(dashboard.Row(title).id(panel_id))
        for graph in graphs:
            panel_id += 1
            board = board.with_panel(panel(graph, panel_id))
    encoded: dict[str, object] = json.loads(json.dumps(board.build(), cls=JSONEncoder))
    return encoded


def render() -> str:
    """The JSON file's text."""
    return json.dumps(build(), indent=2, sort_keys=True) + "\n"


def main() -> int:
    """Write (or with ``--check`` compare) deploy/grafana/weft-dashboard.json."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="fail when the file is stale")
    args = parser.parse_args()
    text = render()
    if args.check:
        if not OUT.exists() or OUT.read_text() != text:
            print(f"{OUT} is out of date: run {Path(__file__).name}", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text)
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
