"""Debian's Prometheus 2.42 scrapes the shared test stack (docs/observability.md).

After one turn with a tool call, one dead letter and one budget rejection, every query of
deploy/grafana/weft-dashboard.json returns at least one series, every alert rule evaluates
without error, and WeftDeadLetters and WeftConsumerLagHigh fire.

Prometheus loads a test copy of deploy/prometheus/alerts.yml: every ``for:`` is 0s and the
lag threshold 0 records, so an alert fires on its first evaluation. The services of the
stack drain their topics at once, so the lag that fires the alert is that of a consumer this
test holds: a real Kafka consumer, tracked by the platform's own lag collector
(``weft_platform.consumer_lag``) and served on a port Prometheus scrapes as job lag-probe,
that reads the garbage record's partition and never handles it.
"""

from __future__ import annotations

import asyncio
import re
import secrets
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import IO, Any

import httpx
import pytest
import yaml
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.structs import TopicPartition
from prometheus_client import CollectorRegistry, start_http_server
from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine
from weft_contracts import Topic
from weft_platform.consumer_lag import ConsumerLagCollector, GroupLag
from weft_storage.gateway.models_budgets import TenantBudget
from weft_testkit import LocalStack, infra_env, read_turn
from weft_testkit.kafka import client_options
from weft_testkit.stack import free_port

from tests.stack_fixtures import ApiKeys, stack_log_dir
from tests.unit.test_observability_ops import ALERTS, RATE_INTERVAL, dashboard_queries

pytestmark = pytest.mark.kafka

AGENT = "builtin-smart-reasoning"
PROBE_GROUP = "obs-lag-probe"
WAIT_S = 45


def _test_rules(path: Path) -> None:
    """The alert rules with ``for: 0s`` and the lag threshold at 0 records."""
    rules = yaml.safe_load(ALERTS.read_text())
    for group in rules["groups"]:
        for rule in group["rules"]:
            rule["for"] = "0s"
            if rule["alert"] == "WeftConsumerLagHigh":
                rule["expr"] = re.sub(r">\s*1000\s*$", "> 0", rule["expr"].strip())
                assert rule["expr"].endswith("> 0"), rule["expr"]
    path.write_text(yaml.safe_dump(rules))


def _metrics_url(stack: LocalStack, name: str, index: int) -> str:
    """``stack.metrics_url`` (testkit), else the services' default: HTTP port + 1000."""
    known = getattr(stack, "metrics_url", None)
    if known is not None:
        return str(known(name, index))
    return f"http://127.0.0.1:{stack.ports[name][index] + 1000}/metrics"


def _targets(stack: LocalStack) -> dict[str, list[str]]:
    """host:port of every process's metrics, by job (the component name)."""
    jobs: dict[str, list[str]] = {}
    for name, ports in stack.ports.items():
        if name == "scripted_llm":
            continue
        for i in range(len(ports)):
            url = httpx.URL(_metrics_url(stack, name, i))
            jobs.setdefault(name.replace("_", "-"), []).append(f"{url.host}:{url.port}")
    return jobs


@pytest.fixture
def lag_probe() -> Iterator[tuple[ConsumerLagCollector, int]]:
    """The platform's lag collector on a registry of its own, served on a free port."""
    registry = CollectorRegistry()
    collector = ConsumerLagCollector("weft_kafka_consumer_lag", registry=registry)
    port = free_port()
    server, thread = start_http_server(port, addr="127.0.0.1", registry=registry)
    try:
        yield collector, port
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def _start_prometheus(tmp_path: Path, port: int, log: IO[str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        ["prometheus", f"--config.file={tmp_path / 'prometheus.yml'}",
         f"--storage.tsdb.path={tmp_path / 'data'}", f"--web.listen-address=127.0.0.1:{port}"],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    proc.wait(timeout=20)


@pytest.fixture
async def prometheus(
    stack: LocalStack, lag_probe: tuple[ConsumerLagCollector, int], tmp_path: Path
) -> AsyncIterator[httpx.AsyncClient]:
    """A Prometheus scraping every process of the stack and the lag probe each second."""
    rules = tmp_path / "alerts-test-copy.yml"
    _test_rules(rules)
    scrape = [
        {"job_name": job, "static_configs": [{"targets": targets}]}
        for job, targets in _targets(stack).items()
    ]
    scrape.append(
        {"job_name": "lag-probe", "static_configs": [{"targets": [f"127.0.0.1:{lag_probe[1]}"]}]}
    )
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(rules)],
        "scrape_configs": scrape,
    }
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    log = (stack_log_dir("e2e") / "prometheus.log").open("w")
    proc = _start_prometheus(tmp_path, port, log)
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as c:
            async with asyncio.timeout(30):
                while True:
                    assert proc.poll() is None, "prometheus exited: see its log"
                    try:
                        if (await c.get("/-/ready")).status_code == 200:
                            break
                    except httpx.TransportError:
                        pass
                    await asyncio.sleep(0.2)
            yield c
    finally:
        _stop(proc)
        log.close()


async def _turn_with_a_tool_call(api: httpx.AsyncClient, stack: LocalStack, kb: str) -> None:
    session = await api.post("/api/v1/sessions", json={"agent_id": AGENT})
    assert session.status_code == 201, session.text
    events = await read_turn(
        api, f"/api/v1/agent-chat/{session.json()['id']}", api_key=stack.api_key,
        json_body={"query": "What payment methods are accepted?", "knowledge_base_ids": [kb]},
    )  # fmt: skip
    assert [e.event for e in events].count("tool_result") >= 1
    assert events[-1].data["data"]["status"] == "completed"


async def _model_error_turn(
    api: httpx.AsyncClient, stack: LocalStack, llm: httpx.AsyncClient
) -> None:
    """A turn whose model call fails (a 400 the client does not retry): an LLM error."""
    marker = f"OBS-LLM-FAIL-{secrets.token_hex(3)}"
    step = {"match": marker, "error": {"status": 400, "message": "scripted failure"}}
    assert (await llm.post("/_script", json={"steps": [step]})).status_code == 200
    session = await api.post("/api/v1/sessions", json={"agent_id": AGENT})
    assert session.status_code == 201, session.text
    events = await read_turn(
        api, f"/api/v1/agent-chat/{session.json()['id']}", api_key=stack.api_key,
        json_body={"query": f"{marker} please"},
    )  # fmt: skip
    assert events[-1].event == "complete"
    await llm.post("/_reset")  # back to the demo policy for the turns that follow


async def _budget_rejection(api_keys: ApiKeys, infra: dict[str, str]) -> None:
    """A tenant with a budget of 1 token a day: its first turn spends it, its next is 429."""
    tenant = f"obs-budget-{secrets.token_hex(3)}"
    engine = create_async_engine(infra["WEFT_DATABASE_URL"])
    try:
        async with async_sessionmaker(engine)() as s, s.begin():
            s.add(TenantBudget(tenant_id=tenant, tokens_per_day=1))
    finally:
        await engine.dispose()
    client = await api_keys.client(tenant=tenant)
    body = {"name": "obs", "kb_selection_mode": "none", "allowed_tools": []}
    agent = await client.http.post("/api/v1/agents", json=body)
    assert agent.status_code == 201, agent.text
    session = await client.http.post("/api/v1/sessions", json={"agent_id": agent.json()["id"]})
    assert session.status_code == 201, session.text
    path = f"/api/v1/agent-chat/{session.json()['id']}"
    events = await read_turn(client.http, path, api_key=client.key, json_body={"query": "hi"})
    assert events[-1].data["data"]["status"] == "completed"
    refused = await client.http.post(path, json={"query": "again"})
    assert refused.status_code == 429, refused.text


async def _dead_letter_held_by_the_probe(
    stack: LocalStack, collector: ConsumerLagCollector
) -> tuple[AIOKafkaConsumer, GroupLag]:
    """One garbage record on tool.calls (tool-exec dead-letters it); the probe's consumer
    fetches that partition and notes the record as the one it is handling, forever (the
    collector holds trackers weakly: the caller keeps the one returned alive)."""
    kafka = client_options(infra_env())
    topic = stack.prefix + Topic.TOOL_CALLS.value
    producer = AIOKafkaProducer(**kafka)
    await producer.start()
    try:
        sent = await producer.send_and_wait(topic, b"garbage for the scrape test", key=b"k")
    finally:
        await producer.stop()
    collector.strip_prefix(stack.prefix)
    tracker = collector.group(PROBE_GROUP)
    consumer = AIOKafkaConsumer(**kafka, group_id=None, enable_auto_commit=False)
    await consumer.start()
    tp = TopicPartition(topic, sent.partition)
    consumer.assign([tp])
    consumer.seek(tp, sent.offset)
    async with asyncio.timeout(30):
        while consumer.highwater(tp) is None:
            await consumer.getmany(tp, timeout_ms=500)
    tracker.at(consumer, topic, sent.partition, sent.offset)
    return consumer, tracker


async def _query(prom: httpx.AsyncClient, expr: str) -> list[dict[str, Any]]:
    resp = await prom.get("/api/v1/query", params={"query": expr})
    body = resp.json()
    assert resp.status_code == 200 and body["status"] == "success", f"{expr}: {body}"
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


async def _empty_queries(prom: httpx.AsyncClient) -> list[str]:
    empty = []
    for title, expr in dashboard_queries():
        if not await _query(prom, expr.replace("$__rate_interval", RATE_INTERVAL)):
            empty.append(f"{title}: {expr}")
    return empty


async def _firing(prom: httpx.AsyncClient) -> dict[str, list[dict[str, str]]]:
    alerts = (await prom.get("/api/v1/alerts")).json()["data"]["alerts"]
    firing: dict[str, list[dict[str, str]]] = {}
    for a in alerts:
        if a["state"] == "firing":
            firing.setdefault(a["labels"]["alertname"], []).append(a["labels"])
    return firing


async def test_prometheus_scrapes_the_stack_and_the_alerts_fire(
    stack: LocalStack,
    api: httpx.AsyncClient,
    api_keys: ApiKeys,
    infra: dict[str, str],
    knowledge_base: str,
    llm: httpx.AsyncClient,
    lag_probe: tuple[ConsumerLagCollector, int],
    prometheus: httpx.AsyncClient,
) -> None:
    await _turn_with_a_tool_call(api, stack, knowledge_base)
    await _model_error_turn(api, stack, llm)
    await _budget_rejection(api_keys, infra)
    probe, _tracker = await _dead_letter_held_by_the_probe(stack, lag_probe[0])
    try:
        # Wait for the scrapes and evaluations that see it all (conditions, not a sleep).
        empty: list[str] = []
        firing: dict[str, list[dict[str, str]]] = {}
        async with asyncio.timeout(WAIT_S):
            while True:
                empty = await _empty_queries(prometheus)
                firing = await _firing(prometheus)
                if not empty and {"WeftDeadLetters", "WeftConsumerLagHigh"} <= set(firing):
                    break
                await asyncio.sleep(1)
    except TimeoutError:
        pytest.fail(f"dashboard queries without a series: {empty}; firing: {sorted(firing)}")
    finally:
        await probe.stop()

    # Every scrape target is up: Prometheus read every process's exposition.
    down = [r["metric"] for r in await _query(prometheus, "up == 0")]
    assert not down, down
    # Every alert rule evaluated without error.
    groups = (await prometheus.get("/api/v1/rules")).json()["data"]["groups"]
    rules = [r for g in groups for r in g["rules"]]
    assert len(rules) == sum(len(g["rules"]) for g in yaml.safe_load(ALERTS.read_text())["groups"])
    bad = [(r["name"], r.get("lastError")) for r in rules if r["health"] != "ok"]
    assert not bad, bad
    assert any(labels["topic"] == Topic.TOOL_CALLS.value for labels in firing["WeftDeadLetters"]), (
        firing["WeftDeadLetters"]
    )
    assert any(
        labels["group"] == PROBE_GROUP and labels["topic"] == Topic.TOOL_CALLS.value
        for labels in firing["WeftConsumerLagHigh"]
    ), firing["WeftConsumerLagHigh"]
