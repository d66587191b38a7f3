"""Bad input gets a clear 4xx and loses nothing; garbage on Kafka is dead-lettered and the
consumers keep going."""

from __future__ import annotations

import asyncio
import json
import secrets
from typing import Any

import httpx
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from weft_contracts import Topic
from weft_testkit import LocalStack, infra_env, read_turn
from weft_testkit.kafka import client_options

AGENT = "builtin-smart-reasoning"


async def _session(api: httpx.AsyncClient, agent_id: str | None = AGENT) -> str:
    resp = await api.post("/api/v1/sessions", json={"agent_id": agent_id})
    assert resp.status_code == 201, resp.text
    return str(resp.json()["id"])


async def test_missing_query_is_422_naming_the_field(api: httpx.AsyncClient) -> None:
    session_id = await _session(api)
    resp = await api.post(f"/api/v1/agent-chat/{session_id}", json={"agent_id": AGENT})
    assert resp.status_code == 422
    assert resp.json()["detail"][0]["loc"] == ["body", "query"]


async def test_malformed_json_is_422(api: httpx.AsyncClient) -> None:
    session_id = await _session(api)
    resp = await api.post(
        f"/api/v1/agent-chat/{session_id}",
        content=b'{"query": ',
        headers={"content-type": "application/json"},
    )
    assert resp.status_code == 422


async def test_unknown_session_is_404(api: httpx.AsyncClient) -> None:
    resp = await api.post("/api/v1/agent-chat/ses_nope", json={"query": "hi", "agent_id": AGENT})
    assert resp.status_code == 404
    assert "ses_nope" in resp.json()["detail"]


async def test_unknown_agent_is_404(api: httpx.AsyncClient) -> None:
    session_id = await _session(api)
    resp = await api.post(
        f"/api/v1/agent-chat/{session_id}", json={"query": "hi", "agent_id": "no-such-agent"}
    )
    assert resp.status_code == 404
    assert "no-such-agent" in resp.json()["detail"]


async def test_agent_mode_without_agent_is_400(api: httpx.AsyncClient) -> None:  # SPEC C-02
    session_id = await _session(api, agent_id=None)
    resp = await api.post(f"/api/v1/agent-chat/{session_id}", json={"query": "hi"})
    assert resp.status_code == 400
    assert resp.json()["detail"] == "agent_id is required when agent mode is enabled"


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong"}, {"X-API-Key": "x"}])
async def test_missing_or_wrong_api_key_is_401(stack: LocalStack, headers: dict[str, str]) -> None:
    async with httpx.AsyncClient(base_url=stack.gateway_url, headers=headers) as anonymous:
        resp = await anonymous.post("/api/v1/sessions", json={})
    assert resp.status_code == 401
    assert "API key" in resp.json()["detail"]


async def test_other_tenants_session_is_404(api: httpx.AsyncClient, stack: LocalStack) -> None:
    session_id = await _session(api)
    other = stack.tenant + "-other"
    key = f"key-{secrets.token_hex(8)}"
    await _register_key(stack, other, key)
    async with httpx.AsyncClient(
        base_url=stack.gateway_url, headers={"Authorization": f"Bearer {key}"}
    ) as intruder:
        assert (await intruder.get(f"/api/v1/sessions/{session_id}")).status_code == 404
        resp = await intruder.post(
            f"/api/v1/agent-chat/{session_id}", json={"query": "hi", "agent_id": AGENT}
        )
        assert resp.status_code == 404


async def _register_key(stack: LocalStack, tenant: str, key: str) -> None:
    from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine
    from weft_gateway.auth import ApiKeyAuth
    from weft_testkit import infra_env

    engine = create_async_engine(infra_env()["WEFT_DATABASE_URL"])
    try:
        await ApiKeyAuth(async_sessionmaker(engine)).register(tenant, "intruder", key)
    finally:
        await engine.dispose()


# Topics with a consumer in this version, and how many consumer groups read each one.
CONSUMED = {
    Topic.AGENT_REQUESTS: 1,  # engine
    Topic.AGENT_EVENTS: 3,  # gateway projector, memory, suggestions
    Topic.TOOL_CALLS: 1,  # tool-exec
    Topic.SANDBOX_CALLS: 1,  # sandbox
    Topic.TOOL_RESULTS: 1,  # engine
}


async def test_garbage_on_every_topic_is_dead_lettered_and_consumers_keep_going(
    api: httpx.AsyncClient, stack: LocalStack, knowledge_base: str
) -> None:
    kafka = client_options(infra_env())
    marker = secrets.token_hex(6)
    payloads = {
        "not_json": f"garbage {marker}".encode(),
        "wrong_shape": json.dumps({"type": "chat_requested", "marker": marker}).encode(),
    }
    dlq = AIOKafkaConsumer(
        stack.prefix + Topic.DLQ.value,
        **kafka,
        group_id=f"test-dlq-{marker}",
        auto_offset_reset="earliest",
    )
    await dlq.start()
    producer = AIOKafkaProducer(**kafka)
    await producer.start()
    try:
        for topic in CONSUMED:
            for payload in payloads.values():
                await producer.send_and_wait(stack.prefix + topic.value, payload, key=b"k")
        expected = sum(CONSUMED.values()) * len(payloads)
        letters = await _collect_dead_letters(dlq, marker, expected)
    finally:
        await producer.stop()
        await dlq.stop()

    by_topic: dict[str, int] = {}
    for letter in letters:
        data = letter["data"]
        assert data["reason"].startswith("undecodable: ")
        assert marker in data["raw"]
        by_topic[data["source_topic"]] = by_topic.get(data["source_topic"], 0) + 1
    assert by_topic == {t.value: n * len(payloads) for t, n in CONSUMED.items()}

    # The consumers are still alive: a real turn still completes.
    session_id = await _session(api)
    events = await read_turn(
        api,
        f"/api/v1/agent-chat/{session_id}",
        api_key=stack.api_key,
        json_body={"query": "What payment methods are accepted?",
                   "knowledge_base_ids": [knowledge_base]},
    )  # fmt: skip
    assert events[-1].data["data"]["status"] == "completed"


async def _collect_dead_letters(
    consumer: AIOKafkaConsumer, marker: str, expected: int
) -> list[dict[str, Any]]:
    letters: list[dict[str, Any]] = []
    async with asyncio.timeout(60):
        while len(letters) < expected:
            batch = await consumer.getmany(timeout_ms=1000)
            for records in batch.values():
                for record in records:
                    value = json.loads(record.value)
                    if marker in value["data"]["raw"]:
                        letters.append(value)
    return letters
