"""StreamProjector: copies ``agent.events`` into per-session Redis Streams (ARCHITECTURE 4)."""

from __future__ import annotations

from typing import Any

from weft_gateway.limits import TenantLimits
from weft_gateway.streams import TERMINAL, SessionStreams


class StreamProjector:
    """Consumer of the gateway's projector group; one write per event, duplicates dropped.
    A turn's ``complete`` also frees its tenant's running-turn slot."""

    def __init__(self, streams: SessionStreams, limits: TenantLimits | None = None):
        self._streams = streams
        self._limits = limits

    async def handle(self, event: Any) -> None:
        """Append ``event`` to its session's stream."""
        await self._streams.append(event)
        if self._limits is not None and event.type == TERMINAL:
            await self._limits.release_turn(event.tenant_id, event.request_id)
