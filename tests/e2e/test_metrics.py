"""Every process (the eight services and knowledge's ingestion worker) serves Prometheus
metrics on its own port, and they move when a turn runs.

One turn with one tool call (search_knowledge) and one record of garbage (one dead
letter) through the shared stack; the counters are read before and after, since other
tests share the stack's processes. Labels stay bounded: no session id in any label.
"""

from __future__ import annotations

import asyncio
import secrets

import httpx
from aiokafka import AIOKafkaProducer
from prometheus_client.parser import text_string_to_metric_families
from weft_contracts import Topic
from weft_testkit import LocalStack, infra_env, read_turn
from weft_testkit.kafka import client_options
from weft_testkit.stack import SERVICES, WORKERS

AGENT = "builtin-smart-reasoning"

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


async def scrape(client: httpx.AsyncClient, url: str) -> Samples:
    """Every sample of one process's metrics, parsed by prometheus_client's own parser
    (a malformed exposition raises here)."""
    resp = await client.get(url)
    assert resp.status_code == 200, resp.text
    assert resp.headers["content-type"].startswith("text/plain")
    samples: Samples = {}
    for family in text_string_to_metric_families(resp.text):
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return samples


def total(samples: Samples, name: str, **labels: str) -> float:
    """The sum of ``name``'s samples whose labels include ``labels``."""
    wanted = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and wanted <= ls)


async def _scrape_all(client: httpx.AsyncClient, stack: LocalStack) -> dict[str, Samples]:
    """Every process of the stack: the services and their workers (the ingestion worker)."""
    return {name: await scrape(client, stack.metrics_url(name)) for name in (*SERVICES, *WORKERS)}


async def model_calls(stack: LocalStack, process: str, model: str = "weft-scripted") -> float:
    """Answered model requests one process counted (``weft_llm_request_duration_seconds``):
    the wiki and graph tests read the ingestion worker's before and after its model calls."""
    async with httpx.AsyncClient(timeout=10) as client:
        samples = await scrape(client, stack.metrics_url(process))
    return total(samples, "weft_llm_request_duration_seconds_count", model=model)


async def test_every_service_serves_metrics_on_its_own_port(stack: LocalStack) -> None:
    async with httpx.AsyncClient(timeout=10) as client:
        scraped = await _scrape_all(client, stack)
        assert set(scraped) == {*SERVICES, "knowledge_worker"}
        for name, samples in scraped.items():
            assert total(samples, "process_cpu_seconds_total") > 0, name
            assert total(samples, "process_resident_memory_bytes") > 0, name
        # The ingestion worker reports its queue by state (what KEDA scales it on); the
        # count runs at its start, then every 15 s.
        depth = {dict(ls)["state"] for n, ls in scraped["knowledge_worker"]
                 if n == "weft_ingestion_queue_depth"}  # fmt: skip
        assert depth == {"pending", "processing"}, depth
        jobs = {(dict(ls)["queue"], dict(ls)["state"]) for n, ls in scraped["knowledge_worker"]
                if n == "weft_knowledge_job_queue_depth"}  # fmt: skip
        assert jobs == {("wiki", "pending"), ("wiki", "paused"), ("wiki", "generating"),
                        ("graph", "pending"), ("graph", "paused"), ("graph", "processing")}, (
            jobs
        )  # fmt: skip
        # Never on an API port: the gateway's public port has no /metrics.
        public = await client.get(f"{stack.gateway_url}/metrics")
        assert public.status_code == 404


async def test_counters_move_when_a_turn_runs(
    api: httpx.AsyncClient, stack: LocalStack, knowledge_base: str
) -> None:
    async with httpx.AsyncClient(timeout=10) as client:
        before = await _scrape_all(client, stack)
        resp = await api.post("/api/v1/sessions", json={"agent_id": AGENT})
        assert resp.status_code == 201, resp.text
        session_id = str(resp.json()["id"])
        events = await read_turn(
            api,
            f"/api/v1/agent-chat/{session_id}",
            api_key=stack.api_key,
            json_body={"query": "How long do I have to get a refund on an annual plan?",
                       "knowledge_base_ids": [knowledge_base]},
        )  # fmt: skip
        assert events[-1].data["data"]["status"] == "completed"
        assert [e.event for e in events].count("tool_call") == 1
        await _send_garbage(stack, Topic.TOOL_CALLS)

        after = await _wait_for(client, stack, before)

    engine, tools, gateway = after["engine"], after["tool_exec"], after["gateway"]
    was_engine, was_tools, was_gateway = before["engine"], before["tool_exec"], before["gateway"]

    def moved(now: Samples, was: Samples, name: str, **labels: str) -> float:
        return total(now, name, **labels) - total(was, name, **labels)

    assert moved(engine, was_engine, "weft_turns_started_total", mode="agent") >= 1
    ended = moved(
        engine, was_engine, "weft_turns_ended_total", status="completed", reason="answered"
    )
    assert ended >= 1
    assert moved(engine, was_engine, "weft_turn_duration_seconds_count", status="completed") >= 1
    assert moved(engine, was_engine, "weft_rounds_total") >= 2  # the tool round, the answer
    llm = {"model": "weft-scripted"}
    assert moved(engine, was_engine, "weft_llm_request_duration_seconds_count", **llm) >= 2
    assert moved(engine, was_engine, "weft_llm_time_to_first_token_seconds_count", **llm) >= 1
    assert moved(engine, was_engine, "weft_llm_tokens_total", kind="completion", **llm) > 0
    call = {"tool": "search_knowledge"}
    assert moved(tools, was_tools, "weft_tool_calls_total", outcome="success", **call) >= 1
    assert moved(tools, was_tools, "weft_tool_call_duration_seconds_count", **call) >= 1
    letter = {"topic": Topic.TOOL_CALLS.value, "reason": "undecodable"}
    assert moved(tools, was_tools, "weft_dead_letters_total", **letter) == 1
    # HTTP by route template: the turn's route counted, its session id in no label.
    route = {"route": "/api/v1/agent-chat/{session_id}", "method": "POST"}
    assert moved(gateway, was_gateway, "weft_http_requests_total", status="200", **route) >= 1
    for samples in after.values():
        for _, labels in samples:
            assert not any(session_id in value for _, value in labels), labels
    assert moved(gateway, was_gateway, "weft_sse_send_latency_seconds_count") >= 1
    assert ("weft_sse_connections", frozenset()) in gateway
    # Lag from the consumer's own view: the engine's request group reports its partitions.
    lag = [ls for n, ls in engine if n == "weft_kafka_consumer_lag"]
    assert any(("group", "weft-engine") in ls for ls in lag), lag


async def _send_garbage(stack: LocalStack, topic: Topic) -> None:
    producer = AIOKafkaProducer(**client_options(infra_env()))
    await producer.start()
    try:
        payload = f"garbage {secrets.token_hex(6)}".encode()
        await producer.send_and_wait(stack.prefix + topic.value, payload, key=b"k")
    finally:
        await producer.stop()


async def _wait_for(
    client: httpx.AsyncClient, stack: LocalStack, before: dict[str, Samples]
) -> dict[str, Samples]:
    """Scrape until the dead letter and the turn's end are counted (each is counted once
    its record is written, which may be after the client read the turn's end)."""
    counted = (("tool_exec", "weft_dead_letters_total"), ("engine", "weft_turns_ended_total"))
    async with asyncio.timeout(30):
        while True:
            after = await _scrape_all(client, stack)
            if all(total(after[s], n) > total(before[s], n) for s, n in counted):
                return after
            await asyncio.sleep(0.2)
