"""Turn-end cleanup (SPEC T-04): every tool-exec process hears every ``complete``.

A turn's calls spread over all workers (``tool.calls`` is keyed by call id), and each
process keeps its own per-session state (DuckDB tables, thoughts), so the end of a turn
must reach every process, not one member of a consumer group: each process reads
``agent.events`` as a broadcast consumer (``EventBus.broadcast``: no group, every
partition from the latest offset, nothing committed).

The consumer only filters and enqueues: records other than ``complete`` are skipped by
their ``type`` header without decoding the JSON, and cleanups run one after another in a
background task, so a slow or failing cleanup never delays tool calls or the consumer.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import structlog
from weft_contracts import CompleteEvent, Topic
from weft_platform.bus import EventBus
from weft_platform.tasks import cancel_and_wait
from weft_tool_catalog import ToolRegistry

log = structlog.get_logger(__name__)

COMPLETE = "complete"
CLEANUP_LINGER_MS = 500
"""Cleanup is not urgent: the broker holds each fetch until 64 KiB or this long, so every
worker makes a few fetches a second, not one per agent event."""


@dataclass(frozen=True)
class TurnEnded:
    """One finished turn."""

    session_id: str
    request_id: str


def turn_ended(event: Any) -> TurnEnded | None:
    """The turn a ``complete`` event ends; None for any other event (one without a
    ``type`` header is decoded, whatever its type)."""
    if not isinstance(event, CompleteEvent):
        return None
    return TurnEnded(event.session_id, event.request_id)


class TurnEndCleaner:
    """Runs the registry's cleanup for every turn that ends, in the background."""

    def __init__(self, registry: ToolRegistry, *, max_pending: int = 10_000):
        self._registry = registry
        self._pending: asyncio.Queue[TurnEnded] = asyncio.Queue(maxsize=max_pending)
        self._task: asyncio.Task[None] | None = None
        self.cleaned = 0
        """Turns cleaned up by this process (for the debug endpoint and logs)."""

    def subscribe(self, bus: EventBus) -> None:
        """Read ``agent.events`` as a broadcast consumer of this process."""

        async def on_event(event: Any) -> None:
            ended = turn_ended(event)
            if ended is not None:
                self.notify(ended)

        bus.broadcast(Topic.AGENT_EVENTS, on_event, types={COMPLETE}, linger_ms=CLEANUP_LINGER_MS)

    def notify(self, ended: TurnEnded) -> None:
        """Queue a cleanup; when the queue is full it is skipped (idle eviction remains)."""
        try:
            self._pending.put_nowait(ended)
        except asyncio.QueueFull:
            log.warning("turn_cleanup_skipped", session_id=ended.session_id, reason="queue full")

    async def start(self) -> None:
        """Start the background task running the cleanups."""
        self._task = asyncio.create_task(self._run(), name="turn-end-cleanup")

    async def stop(self) -> None:
        """Cancel the task (pending cleanups are dropped: the process holds nothing after)."""
        await cancel_and_wait([self._task])

    async def _run(self) -> None:
        while True:
            ended = await self._pending.get()
            try:
                await self._registry.cleanup(ended.session_id, ended.request_id)
                self.cleaned += 1
            except asyncio.CancelledError:
                raise
            except Exception:  # registry.cleanup isolates tools; this guards the loop itself
                log.exception("turn_cleanup_failed", session_id=ended.session_id)
