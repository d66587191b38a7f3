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
from weft_platform.topic_window import read_window

from weft_gateway.limits import TenantLimits
from weft_gateway.streams import TERMINAL, SessionStreams, StreamsLost

log = structlog.get_logger(__name__)

Replay = Callable[[], Awaitable[int]]
"""Writes the recent log of ``agent.events`` into the streams again; the events read."""


class StreamProjector:
    """Consumer of the gateway's projector group; duplicates (same turn and ``seq``) are
    dropped by the stream script. A turn's ``complete`` also frees its tenant's
    running-turn slot.

    When Redis lost the streams (it came back empty: its sentinel is gone), the events it
    held that clients had not read yet would be lost, and writing the current batch first
    would make the stream script drop those older events of the same turns. So the recent
    log is replayed first (``replay``), then the sentinel written again, then the batch."""

    def __init__(
        self,
        streams: SessionStreams,
        limits: TenantLimits | None = None,
        replay: Replay | None = None,
    ):
        self._streams = streams
        self._limits = limits
        self._replay = replay

    async def handle(self, event: Any) -> None:
        """Append ``event`` to its session's stream."""
        await self.handle_batch([event])

    async def handle_batch(self, events: Sequence[Any]) -> None:
        """Append a batch in one Redis round trip, in record order (so per session in
        ``seq`` order), then free the turn slots of the turns it completes. Raises when
        Redis fails: the bus then hands the batch back to Kafka, and the redelivery
        writes only what is missing."""
        try:
            await self._streams.append_many(events)
        except StreamsLost:
            log.warning("streams_lost_replaying")
            replayed = await self._replay() if self._replay is not None else 0
            await self._streams.vouch()
            log.info("streams_replayed", events=replayed)
            await self._streams.append_many(events)  # what the replay wrote is skipped
        if self._limits is None:
            return
        for event in events:
            if event.type == TERMINAL:
                await self._limits.release_turn(event.tenant_id, event.request_id)


def log_replay(bootstrap: str, topic: str, window_s: float, streams: SessionStreams) -> Replay:
    """A :data:`Replay` that writes the last ``window_s`` of ``topic`` (``agent.events``)
    into ``streams``, fetch by fetch in partition order; the stream script skips what is
    there already. Records that do not decode are skipped: the group consumer dead-letters
    them."""
    adapter: TypeAdapter[Any] = TypeAdapter(TOPIC_MODELS[Topic.AGENT_EVENTS])

    async def append(records: Sequence[Any]) -> None:
        events = []
        for record in records:
            try:
                events.append(read_json(adapter, record.value or b""))
            except (ValidationError, UnsupportedSchemaVersion):
                continue
        await streams.append_many(events, guarded=False)

    async def replay() -> int:
        since_ms = int((time.time() - window_s) * 1000)
        return await read_window(bootstrap, topic, since_ms, append, limit_s=120)

    return replay
