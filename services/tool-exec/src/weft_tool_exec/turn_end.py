"""Turn-end cleanup (SPEC T-04): every tool-exec process hears every ``complete``.

A turn's calls spread over all workers (``tool.calls`` is keyed by call id), and each
process keeps its own per-session state (DuckDB tables, thoughts), so the end of a turn
must reach every process, not one member of a consumer group. Each process therefore
reads ``agent.events`` *without* a consumer group: aiokafka assigns it every partition,
starts at the latest offset (a fresh process holds nothing to clean) and commits nothing,
so restarts leave no abandoned groups on the broker.

The consumer only filters and enqueues: records other than ``complete`` are skipped by
their ``type`` header without decoding the JSON, and cleanups run one after another in a
background task, so a slow or failing cleanup never delays tool calls or the consumer.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import structlog
from faststream import AckPolicy
from faststream.message import StreamMessage
from pydantic import ValidationError
from weft_contracts import CompleteEvent, Topic
from weft_platform.bus import EventBus
from weft_platform.tasks import cancel_and_wait
from weft_tools import ToolRegistry

log = structlog.get_logger(__name__)

COMPLETE = "complete"


@dataclass(frozen=True)
class TurnEnded:
    """One finished turn."""

    session_id: str
    request_id: str


async def _body_and_headers(message: StreamMessage[Any]) -> tuple[bytes, dict[str, Any]]:
    """Decoder: what ``turn_ended`` reads, without a ``KafkaMessage`` context parameter
    (FastStream resolves those in a worker thread, one hop per record)."""
    return message.body, message.headers


def turn_ended(body: bytes, headers: dict[str, Any]) -> TurnEnded | None:
    """The turn a ``complete`` record ends; None for any other (or unreadable) record."""
    kind = headers.get("type")
    if kind is not None and kind != COMPLETE:
        return None  # the common case (deltas, tool events): no JSON parsing
    try:
        event = CompleteEvent.model_validate_json(body)
    except ValidationError:
        return None  # another event type, or garbage (the other consumers dead-letter it)
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
        """Read ``agent.events`` as a group-less (broadcast) consumer of this process."""

        async def on_record(delivery: Any) -> None:
            ended = turn_ended(*delivery)
            if ended is not None:
                self.notify(ended)

        bus.broker.subscriber(
            bus.topic_name(Topic.AGENT_EVENTS),
            group_id=None,
            auto_offset_reset="latest",
            ack_policy=AckPolicy.ACK_FIRST,  # nothing to commit without a group
            # Cleanup is not urgent: the broker holds each fetch until 64 KiB or 500 ms,
            # so every worker makes a few fetches a second, not one per agent event.
            fetch_min_bytes=64 * 1024,
            fetch_max_wait_ms=500,
            decoder=_body_and_headers,
        )(on_record)

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
