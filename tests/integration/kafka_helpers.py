"""Reading what a service wrote to Kafka, for integration tests."""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRecord, TopicPartition
from faststream.kafka import TestKafkaBroker
from weft_contracts import Topic
from weft_platform.bus import EventBus
from weft_platform.runtime import ServiceRuntime, create_runtime
from weft_platform.settings import KafkaAccess, ServiceSettings
from weft_platform.topics import delete_topics, ensure_topics
from weft_testkit.kafka import settings_fields


def kafka_access(infra: dict[str, str]) -> KafkaAccess:
    """The tests' own login to the broker of ``infra`` (its super user on a SASL broker)."""
    return KafkaAccess(**settings_fields(infra))  # type: ignore[arg-type]


@asynccontextmanager
async def own_topics(infra: dict[str, str], partitions: int = 2) -> AsyncIterator[str]:
    """A fresh topic prefix with every topic created (``partitions`` each); the topics are
    deleted on exit, so the long-lived local broker does not pile them up."""
    prefix = f"it{secrets.token_hex(4)}."
    access = kafka_access(infra)
    await ensure_topics(access, {"WEFT_TOPIC_PARTITIONS": str(partitions)}, prefix=prefix)
    try:
        yield prefix
    finally:
        await delete_topics(access, prefix)


@asynccontextmanager
async def service_runtime(
    infra: dict[str, str],
    name: str,
    *,
    prefix: str | None = None,
    partitions: int = 2,
    start: bool = False,
    check_credentials: bool = False,
    **settings: Any,
) -> AsyncIterator[ServiceRuntime]:
    """A service's runtime on the real Kafka/PostgreSQL/Redis, closed on exit.

    ``check_credentials``: its consumers verify records' credentials, as a service's do;
    off by default, so tests of other contracts publish records without signing them
    (the check has its own tests, tests/security/test_service_credentials.py).

    Without ``prefix`` it gets topics of its own (``partitions`` each, deleted on exit);
    with one it joins topics another part of the test created. ``start`` starts the broker
    (needed to publish before any consumer is registered)."""
    if prefix is None:
        async with (
            own_topics(infra, partitions) as own,
            service_runtime(
                infra,
                name,
                prefix=own,
                start=start,
                check_credentials=check_credentials,
                **settings,
            ) as rt,
        ):
            yield rt
        return
    rt = create_runtime(
        ServiceSettings(
            service_name=name,
            **settings_fields(infra),  # type: ignore[arg-type]
            redis_url=infra["WEFT_REDIS_URL"],
            database_url=infra["WEFT_DATABASE_URL"],
            topic_prefix=prefix,
            **settings,
        )
    )
    if not check_credentials:
        rt.bus = EventBus(rt.broker, rt.settings, rt.redis)
    if start:
        await rt.broker.start()
    try:
        yield rt
    finally:
        await rt.bus.flush_commits()
        await rt.broker.stop()
        await rt.redis.aclose()
        await rt.db.dispose()


@asynccontextmanager
async def in_memory_runtime(
    infra: dict[str, str], name: str, **settings: Any
) -> AsyncIterator[ServiceRuntime]:
    """A service's runtime whose broker is FastStream's in-memory one (``TestKafkaBroker``):
    a publish hands the record to the matching subscribers in-process; Redis (dedupe) and
    PostgreSQL are the real ones. Subscribers registered before ``rt.broker.start()`` get
    what is published after it, as on the real broker."""
    rt = create_runtime(
        ServiceSettings(
            service_name=name,
            kafka_bootstrap="127.0.0.1:1",  # never dialled: the test broker replaces it
            redis_url=infra["WEFT_REDIS_URL"],
            database_url=infra["WEFT_DATABASE_URL"],
            topic_prefix=f"mem{secrets.token_hex(4)}.",
            **settings,
        )
    )
    rt.bus = EventBus(rt.broker, rt.settings, rt.redis)  # as service_runtime's default
    try:
        # connect_only: the test starts the broker itself once its subscribers are there.
        async with TestKafkaBroker(rt.broker, connect_only=True):
            yield rt
    finally:
        await rt.redis.aclose()
        await rt.db.dispose()


async def dead_letters(rt: ServiceRuntime, count: int) -> list[dict[str, Any]]:
    """The first ``count`` dead letters of ``rt``'s deployment (fails after 30 s)."""
    return await read_topic(rt, Topic.DLQ, lambda letters: len(letters) >= count)


async def read_topic(
    rt: ServiceRuntime, topic: Topic, enough: Callable[[list[dict[str, Any]]], bool]
) -> list[dict[str, Any]]:
    """The records of ``topic`` in ``rt``'s deployment from the start, decoded, once
    ``enough`` of them are there (fails after 30 s)."""
    topics = [rt.bus.topic_name(topic)]
    return await records_until(rt.settings, topics, enough)


async def records_until(
    access: KafkaAccess, topics: list[str], enough: Callable[[list[dict[str, Any]]], bool]
) -> list[dict[str, Any]]:
    """The JSON-object records of ``topics`` (full names) from the start, once ``enough``
    of them are there (fails after 30 s). Records that are not JSON objects are skipped: a
    shared stack's topics also carry the garbage of the bad-input tests."""
    consumer = AIOKafkaConsumer(
        *topics,
        **access.client_options(),
        auto_offset_reset="earliest",
        group_id=f"read-{secrets.token_hex(4)}",
    )
    await consumer.start()
    found: list[dict[str, Any]] = []
    try:
        async with asyncio.timeout(30):
            while not enough(found):
                for records in (await consumer.getmany(timeout_ms=500)).values():
                    found.extend(_objects(records))
    finally:
        await consumer.stop()
    return found


async def records_so_far(access: KafkaAccess, topics: list[str]) -> list[dict[str, Any]]:
    """Every JSON-object record already on ``topics`` (full names): read up to the end
    offsets the topics have when called. What was written before the call is all there,
    so a test can assert that something was never written without waiting for it."""
    partitions = await _partitions(access, topics)
    consumer = AIOKafkaConsumer(**access.client_options(), enable_auto_commit=False)
    await consumer.start()
    found: list[dict[str, Any]] = []
    try:
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        ends = await consumer.end_offsets(partitions)
        async with asyncio.timeout(30):
            for partition in partitions:
                while await consumer.position(partition) < ends[partition]:
                    batch = await consumer.getmany(partition, timeout_ms=500)
                    found.extend(_objects(batch.get(partition, [])))
    finally:
        await consumer.stop()
    return found


async def _partitions(access: KafkaAccess, topics: list[str]) -> list[TopicPartition]:
    """Every partition of ``topics``: a consumer only knows the metadata of topics it
    subscribed to, the producer fetches it on request."""
    producer = AIOKafkaProducer(**access.client_options())
    await producer.start()
    try:
        return [
            TopicPartition(topic, p)
            for topic in topics
            for p in sorted(await producer.partitions_for(topic))
        ]
    finally:
        await producer.stop()


def _objects(records: Iterable[ConsumerRecord[Any, Any]]) -> list[dict[str, Any]]:
    decoded = []
    for record in records:
        try:
            value = json.loads(record.value)
        except ValueError:
            continue
        if isinstance(value, dict):
            decoded.append(value)
    return decoded
