"""StreamProjector: copies ``agent.events`` into per-session Redis Streams (ARCHITECTURE 4)."""

from __future__ import annotations

from typing import Any

from weft_gateway.streams import SessionStreams


class StreamProjector:
    """Consumer of the gateway's projector group; one write per event, duplicates dropped."""

    def __init__(self, streams: SessionStreams):
        self._streams = streams

    async def handle(self, event: Any) -> None:
        """Append ``event`` to its session's stream."""
        await self._streams.append(event)
