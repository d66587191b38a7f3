"""Reading what a service wrote to Kafka, for integration tests."""

from __future__ import annotations

import asyncio
import json
import secrets
from typing import Any

from aiokafka import AIOKafkaConsumer
from weft_contracts import Topic
from weft_platform.runtime import ServiceRuntime


async def dead_letters(rt: ServiceRuntime, count: int) -> list[dict[str, Any]]:
    """The first ``count`` dead letters of ``rt``'s deployment (fails after 30 s)."""
    consumer = AIOKafkaConsumer(
        rt.bus.topic_name(Topic.DLQ),
        bootstrap_servers=rt.settings.kafka_bootstrap,
        auto_offset_reset="earliest",
        group_id=f"dlq-{secrets.token_hex(4)}",
    )
    await consumer.start()
    letters: list[dict[str, Any]] = []
    try:
        async with asyncio.timeout(30):
            while len(letters) < count:
                for records in (await consumer.getmany(timeout_ms=500)).values():
                    letters.extend(json.loads(r.value) for r in records)
    finally:
        await consumer.stop()
    return letters
