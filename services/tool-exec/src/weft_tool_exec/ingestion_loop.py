"""The background task that drains the ingestion queue (one per tool-exec process)."""

from __future__ import annotations

import asyncio

import structlog
from weft_platform.tasks import cancel_and_wait
from weft_tools.ingestion import DocumentIngestor

log = structlog.get_logger(__name__)


class IngestionLoop:
    """Ingests documents one after another; sleeps ``poll_s`` when the queue is empty."""

    def __init__(self, ingestor: DocumentIngestor, poll_s: float):
        self._ingestor = ingestor
        self._poll_s = poll_s
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Start the task."""
        self._task = asyncio.create_task(self._run(), name="ingestion-loop")

    async def stop(self) -> None:
        """Cancel the task and wait for it (a document in progress is taken over later)."""
        await cancel_and_wait([self._task])

    async def _run(self) -> None:
        while True:
            try:
                busy = await self._ingestor.ingest_next()
            except asyncio.CancelledError:
                raise
            except Exception:  # database unavailable: retry after the poll interval
                log.exception("ingestion_poll_failed")
                busy = False
            if not busy:
                await asyncio.sleep(self._poll_s)
