"""Reading the dead-letter topic and putting records back, as ``weft-dlq-replay``.

Reads go outside any consumer group (the principal's READ on the topic suffices) from the
start of each partition to its end at the time of the call: listing changes no offset, so
two operators looking at once see the same letters.
"""

from __future__ import annotations

import asyncio
import time

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.structs import TopicPartition
from weft_contracts import Topic
from weft_platform.kafka_acls import DLQ_REPLAY

from weft_cli.dead_letters import REPLAYED_HEADER, Replay, StoredLetter, read_letter
from weft_cli.kafka_link import REQUEST_TIMEOUT_MS, admin_client, kafka_errors, who
from weft_cli.outcome import CommandFailed, ExitCode
from weft_cli.settings import KafkaSettings

READ_WAIT_S = 60.0
_TOPIC_REFUSED = 29


def dlq_topic(settings: KafkaSettings) -> str:
    """The deployment's DLQ topic name."""
    return settings.topic_prefix + Topic.DLQ.value


async def read_letters(settings: KafkaSettings) -> list[StoredLetter]:
    """Every record of the DLQ topic now, oldest first per partition."""
    topic = dlq_topic(settings)
    partitions = await _partitions(settings, topic)
    async with kafka_errors(settings, DLQ_REPLAY):
        consumer = AIOKafkaConsumer(
            **settings.client_options(),
            group_id=None,
            enable_auto_commit=False,
            request_timeout_ms=REQUEST_TIMEOUT_MS,
        )
        await consumer.start()
        try:
            return await _read_to_end(consumer, partitions)
        finally:
            await consumer.stop()


async def _partitions(settings: KafkaSettings, topic: str) -> list[TopicPartition]:
    async with admin_client(settings, DLQ_REPLAY) as admin:
        (found,) = await admin.describe_topics([topic])
    if found["error_code"] == _TOPIC_REFUSED:
        raise CommandFailed(
            f"{who(settings)} may not read {topic}: this command runs as {DLQ_REPLAY!r} "
            "(WEFT_KAFKA_USERNAME/WEFT_KAFKA_PASSWORD)",
            ExitCode.AUTH,
        )
    if found["error_code"] or not found["partitions"]:
        raise CommandFailed(f"no topic {topic} (WEFT_TOPIC_PREFIX or --prefix?)")
    return [TopicPartition(topic, p["partition"]) for p in found["partitions"]]


async def _read_to_end(
    consumer: AIOKafkaConsumer, partitions: list[TopicPartition]
) -> list[StoredLetter]:
    topic = partitions[0].topic
    consumer.assign(partitions)
    await consumer.seek_to_beginning(*partitions)
    ends = await consumer.end_offsets(partitions)
    letters: list[StoredLetter] = []
    deadline = time.monotonic() + READ_WAIT_S
    while [tp for tp in partitions if await consumer.position(tp) < ends[tp]]:
        if time.monotonic() > deadline:
            raise CommandFailed(f"reading {topic} took longer than {READ_WAIT_S:.0f}s")
        batches = await consumer.getmany(*partitions, timeout_ms=1000)
        for tp, records in batches.items():
            letters.extend(
                read_letter(r.partition, r.offset, r.timestamp, r.value)
                for r in records
                if r.offset < ends[tp]
            )
    return letters


async def publish(settings: KafkaSettings, replays: list[tuple[StoredLetter, Replay]]) -> None:
    """Put each record back on its topic, in the order given, each acknowledged by every
    in-sync replica before the next is sent."""
    async with kafka_errors(settings, DLQ_REPLAY):
        producer = AIOKafkaProducer(
            **settings.client_options(),
            acks="all",
            enable_idempotence=False,  # as the services' producers (weft_platform.bus)
            request_timeout_ms=REQUEST_TIMEOUT_MS,
        )
        await producer.start()
        try:
            for stored, replay in replays:
                headers = [
                    ("type", replay.type.encode()),
                    ("content-type", b"application/json"),
                    (REPLAYED_HEADER, f"{dlq_topic(settings)}:{stored.position}".encode()),
                ]
                await asyncio.wait_for(
                    producer.send_and_wait(
                        settings.topic_prefix + replay.topic.value,
                        replay.value,
                        key=replay.key,
                        headers=headers,
                    ),
                    REQUEST_TIMEOUT_MS / 1000 * 2,
                )
        finally:
            await producer.stop()
