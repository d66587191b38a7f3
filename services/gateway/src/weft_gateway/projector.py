"""StreamProjector: copies ``agent.events`` into per-session Redis Streams (ARCHITECTURE 4)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from weft_gateway.limits import TenantLimits
from weft_gateway.streams import TERMINAL, SessionStreams


class StreamProjector:
    """Consumer of the gateway's projector group; duplicates (same turn and ``seq``) are
    dropped by the stream script. A turn's ``complete`` also frees its tenant's
    running-turn slot."""

    def __init__(self, streams: SessionStreams, limits: TenantLimits | None = None):
        self._streams = streams
        self._limits = limits

    async def handle(self, event: Any) -> None:
        """Append ``event`` to its session's stream."""
        await self.handle_batch([event])

    async def handle_batch(self, events: Sequence[Any]) -> None:
        """Append a batch in one Redis round trip, in record order (so per session in
        ``seq`` order), then free the turn slots of the turns it completes. Raises when
        Redis fails: the bus then hands the batch back to Kafka, and the redelivery
        writes only what is missing."""
        await self._streams.append_many(events)
        if self._limits is None:
            return
        for event in events:
            if event.type == TERMINAL:
                await self._limits.release_turn(event.tenant_id, event.request_id)
