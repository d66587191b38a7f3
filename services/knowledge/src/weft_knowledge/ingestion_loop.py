"""The background tasks that drain the ingestion queue (``ingestion_concurrency`` per
ingestion worker process, ``python -m weft_knowledge worker``)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping

import structlog
from weft_platform.metrics import INGESTION_QUEUE_DEPTH, KNOWLEDGE_JOB_QUEUE_DEPTH
from weft_platform.tasks import cancel_and_wait
from weft_storage.listen import ChannelWakeups, IdlePolls

from weft_knowledge.faq_embedding import FaqEmbedder
from weft_knowledge.graph_extraction import GraphExtractor
from weft_knowledge.ingestion import DocumentIngestor

log = structlog.get_logger(__name__)

DEPTH_EVERY_S = 15.0
"""How often the queue's depth is counted (the metric is at most this old)."""


class IngestionLoop:
    """``concurrency`` tasks, each ingesting documents one after another; a task sleeps
    when the queue has nothing it may take (``poll_s``, doubling while the queues stay
    empty up to ``idle_poll_max_s``: :class:`IdlePolls`), or until ``wakeups`` signals a
    newly queued document (``IngestionQueue.enqueue_file`` notifies). With the queue's
    per-tenant cap
    (:meth:`IngestionQueue.claim`), one tenant's big document holds at most that many
    tasks: the others go on with other tenants' documents."""

    def __init__(
        self,
        ingestor: DocumentIngestor,
        poll_s: float,
        *,
        idle_poll_max_s: float | None = None,
        concurrency: int = 1,
        wakeups: ChannelWakeups | None = None,
        depth: Callable[[], Awaitable[dict[str, int]]] | None = None,
        job_depths: Mapping[str, Callable[[], Awaitable[dict[str, int]]]] | None = None,
        depth_every_s: float = DEPTH_EVERY_S,
        graph: GraphExtractor | None = None,
        faq: FaqEmbedder | None = None,
    ):
        """``depth``: the queue's documents by state, counted every ``depth_every_s``
        into ``weft_ingestion_queue_depth`` (one query, whatever the scrape rate);
        ``job_depths``: the later jobs' queues (``wiki``, ``graph``) by state, counted with
        it into ``weft_knowledge_job_queue_depth``."""
        self._depth = depth
        self._job_depths = dict(job_depths or {})
        self._graph = graph
        self._faq = faq
        self._depth_every_s = depth_every_s
        self._ingestor = ingestor
        self._poll_s = poll_s
        self._idle_poll_max_s = poll_s if idle_poll_max_s is None else idle_poll_max_s
        self._concurrency = concurrency
        self._wakeups = wakeups
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        """Start the tasks (and the listener of wake-ups)."""
        self._tasks = [
            asyncio.create_task(self._run(), name=f"ingestion-loop-{i}")
            for i in range(self._concurrency)
        ]
        if self._wakeups is not None:
            self._tasks.append(asyncio.create_task(self._wakeups.run(), name="ingestion-wakeups"))
        if self._depth is not None:
            self._tasks.append(asyncio.create_task(self._count(), name="ingestion-depth"))

    async def stop(self) -> None:
        """Cancel the tasks and wait for them (a document in progress is taken over later)."""
        await cancel_and_wait(self._tasks)

    async def count_once(self) -> None:
        """Set the queue-depth gauge from one count."""
        if self._depth is None:
            return
        for state, n in (await self._depth()).items():
            INGESTION_QUEUE_DEPTH.labels(state=state).set(n)
        for queue, count in self._job_depths.items():
            for state, n in (await count()).items():
                KNOWLEDGE_JOB_QUEUE_DEPTH.labels(queue=queue, state=state).set(n)

    async def _count(self) -> None:
        while True:
            try:
                await self.count_once()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the database is down: the gauge keeps its last value
                log.warning("ingestion_depth_failed", error=repr(exc))
            await asyncio.sleep(self._depth_every_s)

    async def _run(self) -> None:
        polls = IdlePolls(self._poll_s, self._idle_poll_max_s, self._wakeups)
        while True:
            try:
                # Documents first (searchable sooner), then FAQ entries' embeddings (SPEC
                # C-04), then graph extraction (SPEC T-10).
                busy = (
                    await self._ingestor.ingest_next()
                    or (self._faq is not None and await self._faq.embed_next())
                    or (self._graph is not None and await self._graph.extract_next())
                )
            except asyncio.CancelledError:
                raise
            except Exception:  # database unavailable: retry after the poll interval
                log.exception("ingestion_poll_failed")
                busy = False
            await polls.after(busy)
