"""StreamProjector: copies ``agent.events`` into per-session Redis Streams (ARCHITECTURE 4)."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import structlog
from pydantic import TypeAdapter, ValidationError
from weft_contracts import Topic, UnsupportedSchemaVersion
from weft_contracts.compat import read_json
from weft_contracts.topics import TOPIC_MODELS
from weft_platform.bus import Logged
from weft_platform.settings import KafkaAccess
from weft_platform.topic_window import read_window

from weft_gateway.limits import TenantLimits
from weft_gateway.streams import TERMINAL, Appended, SessionStreams

log = structlog.get_logger(__name__)

Rebuild = Callable[[Sequence[int]], Awaitable[int]]
"""Writes the recent log of these partitions of ``agent.events`` into the streams again
(unguarded); the events read."""


class StreamProjector:
    """Consumer of the gateway's projector group; duplicates (same turn and ``seq``) are
    dropped by the stream script. A turn's ``complete`` also frees its tenant's
    running-turn slot.

    When Redis lost the streams (a partition's mark is gone), the events it held that
    clients had not read yet would be lost. So the batch's records of that partition are
    not written; the partition's recent log is written again first (``rebuild``, the same
    ids as before: ``SessionStreams``), its mark set, then those records (the rebuild
    wrote most of them: they are skipped). Connected clients and ``Last-Event-ID``
    resumes then continue from where they were, without a gap or a repeat."""

    def __init__(
        self,
        streams: SessionStreams,
        limits: TenantLimits | None = None,
        rebuild: Rebuild | None = None,
    ):
        self._streams = streams
        self._limits = limits
        self._rebuild = rebuild

    async def handle_batch(self, records: Sequence[Logged]) -> None:
        """Append a batch in one Redis round trip, in record order (so per session in
        ``seq`` order), then free the turn slots of the turns it completes. Raises when
        Redis fails: the bus then hands the batch back to Kafka, and the redelivery
        writes only what is missing."""
        results = await self._streams.append_many(records)
        unmarked = [r for r, done in zip(records, results, strict=True)
                    if done is Appended.UNMARKED]  # fmt: skip
        if unmarked:
            await self._restore(unmarked)
        if self._limits is None:
            return
        for record in records:
            # A turn that waits for a person is not running: its slot goes back at its
            # first prompt (SPEC H-02), and giving it back again at the end is a no-op.
            if record.event.type in (TERMINAL, "tool_approval_required"):
                await self._limits.release_turn(record.event.tenant_id, record.event.request_id)

    async def _restore(self, unmarked: Sequence[Logged]) -> None:
        partitions = sorted({r.partition for r in unmarked})
        log.warning("streams_lost_rebuilding", partitions=partitions)
        started = time.monotonic()
        count = await self._rebuild(partitions) if self._rebuild is not None else 0
        upto = {p: max(r.offset for r in unmarked if r.partition == p) for p in partitions}
        await self._streams.mark(upto)
        await self._streams.append_many(unmarked)
        log.info("streams_rebuilt", partitions=partitions, events=count,
                 seconds=round(time.monotonic() - started, 2))  # fmt: skip


def log_rebuild(
    access: KafkaAccess, topic: str, window_s: float, streams: SessionStreams, limit_s: float = 120
) -> Rebuild:
    """A :data:`Rebuild` that writes the last ``window_s`` of ``topic`` (``agent.events``)
    into ``streams``, fetch by fetch in partition order, with their log positions. Records
    that do not decode are skipped: the group consumer dead-letters them."""
    adapter: TypeAdapter[Any] = TypeAdapter(TOPIC_MODELS[Topic.AGENT_EVENTS])

    async def append(records: Sequence[Any]) -> None:
        logged = []
        for record in records:
            try:
                event = read_json(adapter, record.value or b"")
            except (ValidationError, UnsupportedSchemaVersion):
                continue
            logged.append(Logged(event, record.partition, record.offset))
        await streams.append_many(logged, guarded=False)

    async def rebuild(partitions: Sequence[int]) -> int:
        since_ms = int((time.time() - window_s) * 1000)
        since = dict.fromkeys(partitions, since_ms)
        return await read_window(access, topic, since, append, limit_s=limit_s)

    return rebuild
