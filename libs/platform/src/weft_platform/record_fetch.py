"""RecordFetcher: read one record of a topic again by its offset, outside any group.

A :class:`~weft_platform.fair_consumer.FairConsumer` that parks a record (drops its body
to keep reading past a tenant's backlog) reads it again when it is about to run. The
group's own consumer cannot do that without seeking its partition back, which would hand
every later record over again, so a standalone consumer (``group_id=None``, nothing
committed, its partitions assigned by hand) seeks to the record and fetches it. It is
started on first use, and reads one record at a time.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from aiokafka import AIOKafkaConsumer
from aiokafka.structs import TopicPartition

from weft_platform.settings import KafkaAccess
from weft_platform.topic_window import stop_quietly

Fetch = Callable[[TopicPartition, int], Awaitable[tuple[Any, bytes] | None]]
"""The record at ``(partition, offset)`` and its body; None when the log no longer has it
(its retention dropped it, so the first record read is a later one)."""

FETCH_LIMIT_S = 30.0
"""A fetch that takes longer fails (the caller queues the record again)."""


class RecordFetcher:
    """Fetches single records by offset with one standalone consumer."""

    def __init__(self, access: KafkaAccess, *, limit_s: float = FETCH_LIMIT_S):
        self._access = access
        self._limit_s = limit_s
        self._consumer: AIOKafkaConsumer | None = None
        self._lock = asyncio.Lock()

    async def fetch(self, partition: TopicPartition, offset: int) -> tuple[Any, bytes] | None:
        """The record at ``offset`` of ``partition`` (see :data:`Fetch`)."""
        async with self._lock, asyncio.timeout(self._limit_s):
            consumer = await self._started()
            if partition not in consumer.assignment():
                consumer.assign([*consumer.assignment(), partition])
            consumer.seek(partition, offset)
            while True:
                batches = await consumer.getmany(partition, timeout_ms=1000, max_records=1)
                for record in batches.get(partition, []):
                    if record.offset != offset:
                        return None
                    return record, record.value
                if await consumer.position(partition) > offset:
                    return None  # the log starts after it now

    async def _started(self) -> AIOKafkaConsumer:
        if self._consumer is None:
            consumer = AIOKafkaConsumer(
                **self._access.client_options(), group_id=None, enable_auto_commit=False,
                auto_offset_reset="earliest",
            )  # fmt: skip
            await consumer.start()
            self._consumer = consumer
        return self._consumer

    async def stop(self) -> None:
        """Close the consumer, if it was started."""
        if self._consumer is not None:
            await stop_quietly(self._consumer)
            self._consumer = None
