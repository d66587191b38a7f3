"""FAQ entries' embeddings, computed by the ingestion workers off the request path
(SPEC C-04) and metered against the tenant through memory's usage.

A write of entries queues one job (``weft_storage.knowledge.faq_jobs``); a worker claims
it, embeds the questions it still owes in batches (each batch stored with the progress,
so the entries become semantically searchable batch by batch), then reports the job's
running token total to memory (``PUT /internal/usage/model-calls/{job id}``, source
``embedding``: idempotent, the total replaces) and marks it ready. An embedding call that
fails, or memory not taking the usage, fails the attempt: retried after a backoff up to
``max_attempts``, then ``failed`` with the reason (``GET`` of the KB shows it; the entries
stay keyword-searchable). A job is bounded by the import's row limit; a batch by
``batch_size``.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import structlog
from weft_storage.knowledge.faq_jobs import EmbeddingJob, FaqEmbeddingQueue
from weft_tools.embeddings import Embedder, embed_counted

from weft_knowledge.usage import ModelUsage

log = structlog.get_logger(__name__)

USAGE_SOURCE = "embedding"
"""memory's usage source of embedding calls made at ingestion."""


class UsageUnsent(RuntimeError):
    """memory did not take the job's usage (the attempt is retried)."""


@dataclass(frozen=True, kw_only=True)
class FaqEmbeddingSettings:
    """Batches, retries and fairness of FAQ embedding jobs."""

    batch_size: int = 32
    max_attempts: int = 5
    retry_backoff_s: float = 5.0
    """Delay before attempt n+1 = ``retry_backoff_s * n``."""
    tenant_max_inflight: int = 1
    tenants: tuple[str, ...] = ()
    """Only these tenants' jobs (workers dedicated to some tenants); empty: all."""


class FaqEmbedder:
    """Claims and runs one FAQ embedding job at a time."""

    def __init__(
        self,
        queue: FaqEmbeddingQueue,
        embedder: Embedder,
        usage: ModelUsage | None,
        settings: FaqEmbeddingSettings | None = None,
    ):
        self._queue = queue
        self._embedder = embedder
        self._usage = usage
        self._settings = settings or FaqEmbeddingSettings()

    async def embed_next(self) -> bool:
        """Run one due job; False when none is waiting."""
        settings = self._settings
        job = await self._queue.claim(
            tenant_max_inflight=settings.tenant_max_inflight, tenants=settings.tenants
        )
        if job is None:
            return False
        try:
            embedded = await self._embed(job)
            await self._meter(job)
            await self._queue.finish(job)
            log.info("faq_embedded", job_id=job.id, entries=embedded)
        except asyncio.CancelledError:
            raise  # the claim goes stale and another worker takes the job over
        except Exception as exc:  # the embedding endpoint or memory: retried, then failed
            await self._failed(job, f"{type(exc).__name__}: {exc}")
        return True

    async def _embed(self, job: EmbeddingJob) -> int:
        done = 0
        while owed := await self._queue.owed(job, self._settings.batch_size):
            vectors, tokens = await embed_counted(self._embedder, [e.question for e in owed])
            await self._queue.save_batch(job, [e.id for e in owed], vectors, tokens)
            done += len(owed)
        return done

    async def _meter(self, job: EmbeddingJob) -> None:
        """Report every attempt's tokens as the job's one total (a repeat replaces)."""
        if self._usage is None:
            return
        tokens, calls = await self._queue.totals(job)
        if calls == 0:
            return
        sent = await self._usage.record(
            tenant_id=job.tenant_id, source=USAGE_SOURCE, source_id=job.id,
            input_tokens=tokens, output_tokens=0, llm_calls=calls,
        )  # fmt: skip
        if not sent:
            raise UsageUnsent("memory did not take the embedding usage")

    async def _failed(self, job: EmbeddingJob, error: str) -> None:
        last = job.attempts >= self._settings.max_attempts
        retry = None if last else self._settings.retry_backoff_s * job.attempts
        log.warning("faq_embedding_failed", job_id=job.id, attempt=job.attempts, final=last,
                    error=error)  # fmt: skip
        await self._queue.fail(job, error, retry_in_s=retry)
