"""Consumer lag per group, topic and partition, as ``weft-ops-lag``: committed offsets
(OffsetFetch) against end offsets (ListOffsets). Both need DESCRIBE only, so the
principal reads no record and joins no group."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from aiokafka import AIOKafkaConsumer
from aiokafka.structs import TopicPartition
from weft_platform.kafka_acls import OPS_LAG

from weft_cli.kafka_link import REQUEST_TIMEOUT_MS, admin_client, kafka_errors
from weft_cli.settings import KafkaSettings


async def lag_rows(settings: KafkaSettings, groups: Iterable[str]) -> list[dict[str, Any]]:
    """One row per (group, topic, partition) with a committed offset: committed, end, lag.
    A group that committed nothing yet has one row with ``topic`` None."""
    prefix = settings.topic_prefix
    committed: dict[str, dict[TopicPartition, int]] = {}
    async with admin_client(settings, OPS_LAG) as admin:
        for group in groups:
            offsets = await admin.list_consumer_group_offsets(prefix + group)
            committed[group] = {tp: meta.offset for tp, meta in offsets.items()}
    every = sorted({tp for offsets in committed.values() for tp in offsets})
    ends = await _end_offsets(settings, every)
    rows: list[dict[str, Any]] = []
    for group, offsets in committed.items():
        if not offsets:
            rows.append({"group": group, "topic": None, "partition": None,
                         "committed": None, "end": None, "lag": None})  # fmt: skip
        for tp in sorted(offsets):
            end = ends.get(tp)
            lag = None if end is None or offsets[tp] < 0 else max(0, end - offsets[tp])
            rows.append({"group": group, "topic": tp.topic, "partition": tp.partition,
                         "committed": offsets[tp], "end": end, "lag": lag})  # fmt: skip
    return rows


async def _end_offsets(
    settings: KafkaSettings, partitions: list[TopicPartition]
) -> dict[TopicPartition, int]:
    if not partitions:
        return {}
    async with kafka_errors(settings, OPS_LAG):
        consumer = AIOKafkaConsumer(
            **settings.client_options(), group_id=None, request_timeout_ms=REQUEST_TIMEOUT_MS
        )
        await consumer.start()
        try:
            ends: dict[TopicPartition, int] = await consumer.end_offsets(partitions)
            return ends
        finally:
            await consumer.stop()


def totals(rows: list[dict[str, Any]]) -> dict[str, int]:
    """Lag summed per group (groups without a known lag: 0)."""
    summed: dict[str, int] = {}
    for row in rows:
        summed[row["group"]] = summed.get(row["group"], 0) + (row["lag"] or 0)
    return summed
