"""Read a topic back from a point in time to its current end, outside any consumer group.

For the rare reads that rebuild what a cache lost from the log (Redis is a cache; Kafka
keeps every event: ARCHITECTURE invariant 2): a standalone consumer, nothing committed,
each partition read from the first record at or after ``since`` (``offsets_for_times``) up
to the end offset it had when the read began, records handed over one fetch at a time in
partition order. Bounded in time, so a broker lost mid-read never holds the caller.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from aiokafka import AIOKafkaConsumer
from aiokafka.errors import KafkaError
from aiokafka.structs import TopicPartition

from weft_platform.settings import KafkaAccess

RecordsHandler = Callable[[Sequence[Any]], Awaitable[None]]
"""Takes the records of one fetch (aiokafka ``ConsumerRecord``s), in partition order."""


async def read_window(
    access: KafkaAccess,
    topic: str,
    since_ms: Mapping[int, int] | int,
    handle: RecordsHandler,
    *,
    limit_s: float = 30.0,
    poll_ms: int = 500,
) -> int:
    """Hand ``handle`` every record of ``topic`` from ``since_ms`` (epoch ms; one value for
    every partition, or one per partition to read only those) to the end offsets of the
    moment the read starts; the number of records read. ``TimeoutError`` past ``limit_s``."""
    consumer = AIOKafkaConsumer(**access.client_options(), group_id=None, enable_auto_commit=False)
    try:
        async with asyncio.timeout(limit_s):  # the connection too
            await consumer.start()
            if isinstance(since_ms, int):
                since = {p: since_ms for p in await partitions_of(consumer, topic)}
            else:
                since = dict(since_ms)
            return await _read(consumer, topic, since, handle, poll_ms)
    finally:
        await stop_quietly(consumer)


async def partitions_of(consumer: AIOKafkaConsumer, topic: str) -> list[int]:
    """The topic's partitions. The consumer's public ``partitions_for_topic`` answers only
    for topics it already follows; its client's metadata request covers every topic."""
    cluster = await consumer._client.fetch_all_metadata()
    found = cluster.partitions_for_topic(topic)
    if not found:
        raise RuntimeError(f"topic {topic} has no partitions in the metadata")
    return sorted(found)


async def seek_since(
    consumer: AIOKafkaConsumer, since: Mapping[TopicPartition, int]
) -> dict[TopicPartition, int]:
    """Assign ``consumer`` the partitions of ``since``, each at its first record at or
    after its time (epoch ms), else at its end; their end offsets as of now, where a read
    of the window stops."""
    ends: dict[TopicPartition, int] = await consumer.end_offsets(list(since))
    starts = await consumer.offsets_for_times(dict(since))
    consumer.assign(list(since))
    for tp in since:
        found = starts.get(tp)
        consumer.seek(tp, found.offset if found is not None else ends[tp])
    return ends


async def _read(
    consumer: AIOKafkaConsumer,
    topic: str,
    since: dict[int, int],
    handle: RecordsHandler,
    poll_ms: int,
) -> int:
    ends = await seek_since(consumer, {TopicPartition(topic, p): ms for p, ms in since.items()})
    count = 0
    pending = {tp for tp, end in ends.items() if await consumer.position(tp) < end}
    while pending:
        batches = await consumer.getmany(*pending, timeout_ms=poll_ms)
        for tp, records in batches.items():
            wanted = [r for r in records if r.offset < ends[tp]]
            if wanted:
                count += len(wanted)
                await handle(wanted)
        pending = {tp for tp in pending if await consumer.position(tp) < ends[tp]}
    return count


async def stop_quietly(consumer: AIOKafkaConsumer, limit_s: float = 5.0) -> None:
    """Stop a standalone consumer without letting a broker that went away hold the
    caller: a step or a sweep must never wait on a reader's cleanup."""
    with contextlib.suppress(TimeoutError, KafkaError, OSError):
        async with asyncio.timeout(limit_s):
            await consumer.stop()
