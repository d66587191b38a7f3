"""Reading what a service wrote to Kafka, for integration tests."""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from aiokafka import AIOKafkaConsumer
from weft_contracts import Topic
from weft_platform.runtime import ServiceRuntime, create_runtime
from weft_platform.settings import ServiceSettings
from weft_platform.topics import delete_topics, ensure_topics


@asynccontextmanager
async def service_runtime(
    infra: dict[str, str],
    name: str,
    *,
    prefix: str | None = None,
    partitions: int = 2,
    start: bool = False,
    **settings: Any,
) -> AsyncIterator[ServiceRuntime]:
    """A service's runtime on the real Kafka/PostgreSQL/Redis, closed on exit.

    Without ``prefix`` it gets topics of its own (``partitions`` each); with one it joins
    topics another part of the test created. ``start`` starts the broker (needed to
    publish before any consumer is registered)."""
    owned = prefix is None
    if prefix is None:
        prefix = f"it{secrets.token_hex(4)}."
        partition_env = {"WEFT_TOPIC_PARTITIONS": str(partitions)}
        await ensure_topics(infra["WEFT_KAFKA_BOOTSTRAP"], partition_env, prefix=prefix)
    rt = create_runtime(
        ServiceSettings(
            service_name=name,
            kafka_bootstrap=infra["WEFT_KAFKA_BOOTSTRAP"],
            redis_url=infra["WEFT_REDIS_URL"],
            database_url=infra["WEFT_DATABASE_URL"],
            topic_prefix=prefix,
            **settings,
        )
    )
    if start:
        await rt.broker.start()
    try:
        yield rt
    finally:
        await rt.bus.flush_commits()
        await rt.broker.stop()
        await rt.redis.aclose()
        await rt.db.dispose()
        if owned:  # the topics it created (a long-lived local broker would pile them up)
            await delete_topics(infra["WEFT_KAFKA_BOOTSTRAP"], prefix)


async def dead_letters(rt: ServiceRuntime, count: int) -> list[dict[str, Any]]:
    """The first ``count`` dead letters of ``rt``'s deployment (fails after 30 s)."""
    return await read_topic(rt, Topic.DLQ, lambda letters: len(letters) >= count)


async def read_topic(
    rt: ServiceRuntime, topic: Topic, enough: Callable[[list[dict[str, Any]]], bool]
) -> list[dict[str, Any]]:
    """The records of ``topic`` in ``rt``'s deployment from the start, decoded, once
    ``enough`` of them are there (fails after 30 s)."""
    consumer = AIOKafkaConsumer(
        rt.bus.topic_name(topic),
        bootstrap_servers=rt.settings.kafka_bootstrap,
        auto_offset_reset="earliest",
        group_id=f"read-{secrets.token_hex(4)}",
    )
    await consumer.start()
    found: list[dict[str, Any]] = []
    try:
        async with asyncio.timeout(30):
            while not enough(found):
                for records in (await consumer.getmany(timeout_ms=500)).values():
                    found.extend(json.loads(r.value) for r in records)
    finally:
        await consumer.stop()
    return found
