"""A turn's trail: what ``agent.events`` holds of it, read back outside any consumer group.

Redis holds a running turn's state and its ``seq`` counter; Kafka holds what was actually
published. The two can disagree when a replica stops between them: its counter reserved
seqs whose events never left. The auditor (a turn whose state Redis lost) and a takeover
(a turn whose replica stopped) read the trail to end or continue the turn from what
clients can have seen. The read is rare (never on a healthy turn's path) and bounded in time.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from aiokafka import AIOKafkaConsumer
from aiokafka.partitioner import DefaultPartitioner
from aiokafka.structs import TopicPartition
from weft_platform.settings import KafkaAccess
from weft_platform.topic_window import partitions_of, seek_since, stop_quietly


class TurnRef(Protocol):
    """Names a turn and where its trail starts."""

    @property
    def session_id(self) -> str: ...

    @property
    def request_id(self) -> str: ...

    @property
    def started_at(self) -> datetime: ...


@dataclass(frozen=True)
class TurnTrail:
    """What Kafka holds of one turn."""

    last_seq: int = 0
    completed: bool = False


class TurnTrails(Protocol):
    """Reads turns' events back from ``agent.events``."""

    async def read(self, turns: Sequence[TurnRef]) -> dict[str, TurnTrail]:
        """Each turn's trail by request id (a turn without events: an empty trail)."""
        ...


class KafkaTurnTrails:
    """:class:`TurnTrails` with a standalone consumer (no group, nothing committed).

    A session's events are on the partition its key hashes to: the bus keys
    ``agent.events`` by session (``Envelope.key``) and the producer uses aiokafka's
    default partitioner, which this reader applies to the same key.
    """

    def __init__(
        self,
        access: KafkaAccess,
        topic: str,
        margin_s: float,
        *,
        poll_ms: int = 500,
        limit_s: float = 30.0,
    ):
        self._access = access
        self._topic = topic
        self._margin_s = margin_s
        self._poll_ms = poll_ms
        self._limit_s = limit_s

    async def read(self, turns: Sequence[TurnRef]) -> dict[str, TurnTrail]:
        """Read each involved partition from the oldest turn's start to its end offset;
        ``TimeoutError`` past ``limit_s`` (a broker gone mid-read would otherwise hold the
        sweep forever: the turns are taken up again by a later sweep)."""
        if not turns:
            return {}
        consumer = AIOKafkaConsumer(
            **self._access.client_options(), group_id=None, enable_auto_commit=False
        )
        try:
            async with asyncio.timeout(self._limit_s):  # the connection too
                await consumer.start()
                return await self._read(consumer, turns)
        finally:
            await stop_quietly(consumer)

    async def _read(
        self, consumer: AIOKafkaConsumer, turns: Sequence[TurnRef]
    ) -> dict[str, TurnTrail]:
        partitions = await partitions_of(consumer, self._topic)
        since: dict[TopicPartition, int] = {}
        for turn in turns:
            tp = TopicPartition(self._topic, partition_of(turn.session_id, partitions))
            at_ms = int((turn.started_at.timestamp() - self._margin_s) * 1000)
            since[tp] = min(at_ms, since.get(tp, at_ms))
        ends = await seek_since(consumer, since)
        wanted = {t.request_id for t in turns}
        trails = {rid: TurnTrail() for rid in wanted}
        await self._scan(consumer, ends, wanted, trails)
        return trails

    async def _scan(
        self,
        consumer: AIOKafkaConsumer,
        ends: dict[TopicPartition, int],
        wanted: set[str],
        trails: dict[str, TurnTrail],
    ) -> None:
        pending = {tp for tp, end in ends.items() if await consumer.position(tp) < end}
        while pending:
            batches = await consumer.getmany(*pending, timeout_ms=self._poll_ms)
            for records in batches.values():
                for record in records:
                    _note(record.value, wanted, trails)
            pending = {tp for tp in pending if await consumer.position(tp) < ends[tp]}


def partition_of(session_id: str, partitions: list[int]) -> int:
    """The partition of a session's events (``Envelope.key`` and the default partitioner)."""
    partition: int = DefaultPartitioner()(session_id.encode(), partitions, partitions)
    return partition


def _note(value: bytes | None, wanted: set[str], trails: dict[str, TurnTrail]) -> None:
    """Fold one record into its turn's trail; records of other turns, or unreadable, are
    skipped (the turn's own consumers dead-letter those)."""
    try:
        event: dict[str, Any] = json.loads(value or b"")
        rid = event["request_id"]
        if rid not in wanted:
            return
        seq, completed = int(event["seq"]), event["type"] == "complete"
    except (ValueError, KeyError, TypeError):
        return
    trail = trails[rid]
    trails[rid] = TurnTrail(max(trail.last_seq, seq), trail.completed or completed)
