"""ExtractionWorker: runs memory extraction off the consume path (SPEC M-10).

A few tasks per process drain :class:`ExtractionQueue`; the recorder wakes them when a
turn becomes pending, and they poll every ``poll_s`` for rows left by a crash or due for a
retry. The Kafka consumer never waits on the extraction model: recording ``complete`` costs
one extra UPDATE. A failed model call is logged (``memory_extraction_failed``), kept on the
row (status, attempts, error: ``GET /internal/memories/extractions/{request_id}``) and
retried with backoff up to ``max_attempts``; nothing here can stop the consumer.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass

import structlog
from weft_platform.tasks import cancel_and_wait

from weft_memory.extraction import ExtractionFailed, MemoryExtractor
from weft_memory.extraction_queue import ExtractionJob, ExtractionQueue

log = structlog.get_logger(__name__)


@dataclass(frozen=True, kw_only=True)
class WorkerSettings:
    """How many extractions run at once and how failures are retried."""

    concurrency: int = 2
    poll_s: float = 5.0
    max_attempts: int = 3
    retry_backoff_s: float = 10.0
    """Delay before attempt n+1 = ``retry_backoff_s * n``."""


class ExtractionWorker:
    """Owns the extraction tasks of one memory process."""

    def __init__(
        self, queue: ExtractionQueue, extractor: MemoryExtractor, settings: WorkerSettings
    ):
        self._queue = queue
        self._extractor = extractor
        self._settings = settings
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    def wake(self) -> None:
        """A turn became pending: look now instead of at the next poll."""
        self._wake.set()

    async def start(self) -> None:
        """Start ``concurrency`` tasks."""
        self._tasks = [
            asyncio.create_task(self._run(), name=f"memory-extraction-{i}")
            for i in range(self._settings.concurrency)
        ]

    async def stop(self) -> None:
        """Cancel the tasks and wait for them; a claimed row is taken over when stale."""
        await cancel_and_wait(self._tasks)
        self._tasks = []

    async def _run(self) -> None:
        while True:
            self._wake.clear()  # before the claim: a wake-up during it is not lost
            try:
                busy = await self.run_once()
            except asyncio.CancelledError:
                raise
            except Exception:  # the database is unavailable: try again at the next poll
                log.exception("memory_extraction_poll_failed")
                busy = False
            if not busy:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self._settings.poll_s):  # keeps a shutdown cancel
                        await self._wake.wait()

    async def run_once(self) -> bool:
        """Claim and run one extraction; False when there was nothing to do."""
        job = await self._queue.claim()
        if job is None:
            return False
        if job.attempts > self._settings.max_attempts:  # its worker died on every attempt
            await self._queue.failed(job, "abandoned by its workers", retry_in_s=None)
            return True
        try:
            facts = await self._extractor.facts(job.tenant_id, job.session_id, job.request_id)
        except ExtractionFailed as exc:
            await self._failed(job, str(exc))
            return True
        except Exception as exc:  # a bug or the database: reported on the row, never raised
            await self._failed(job, repr(exc))
            return True
        if facts is None:
            await self._queue.skip(job, "the turn is no longer stored as completed")
            log.info("memory_extraction_skipped", request_id=job.request_id)
            return True
        ids = await self._queue.done(job, facts)
        log.info(
            "memory_extraction_done",
            request_id=job.request_id, tenant_id=job.tenant_id, facts=len(ids),
        )  # fmt: skip
        return True

    async def _failed(self, job: ExtractionJob, error: str) -> None:
        final = job.attempts >= self._settings.max_attempts
        retry_in = None if final else self._settings.retry_backoff_s * job.attempts
        log.warning(
            "memory_extraction_failed",
            request_id=job.request_id, tenant_id=job.tenant_id, attempt=job.attempts,
            final=final, error=error,
        )  # fmt: skip
        await self._queue.failed(job, error, retry_in_s=retry_in)
