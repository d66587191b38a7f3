"""Turn one claimed upload into searchable chunks (SPEC T-07 ingestion).

parse (txt/md/csv/xlsx/pdf) -> overlapping chunks (keyword-searchable at once) ->
embeddings in batches, each batch stored with the progress -> ready. A parse or
embedding failure marks the document ``failed`` with the reason; keyword search keeps
working on whatever chunks exist. A document over one of the :class:`IngestionLimits`
(inflated size, rows, pages, text, chunks, or its tenant's chunks) is ``failed`` with
the bound it broke before anything of it is stored.
"""

from __future__ import annotations

import asyncio

import structlog
from weft_storage.knowledge.ingest import IngestionQueue, PendingDocument
from weft_storage.knowledge.store import split_into_chunks
from weft_tools.document_parsing import UnsupportedDocument, extract_text
from weft_tools.embeddings import Embedder
from weft_tools.ingestion_limits import (
    DEFAULT_LIMITS,
    DocumentRefused,
    DocumentTooLarge,
    IngestionLimits,
)

log = structlog.get_logger(__name__)


class DocumentIngestor:
    """Processes documents from the :class:`IngestionQueue`."""

    def __init__(
        self,
        queue: IngestionQueue,
        embedder: Embedder | None,
        *,
        batch_size: int = 32,
        limits: IngestionLimits = DEFAULT_LIMITS,
        tenant_max_inflight: int = 1,
    ):
        """``tenant_max_inflight``: documents of one tenant ingested at once across every
        worker (the claim prefers tenants with fewer, :meth:`IngestionQueue.claim`)."""
        self._queue = queue
        self._embedder = embedder
        self._batch = batch_size
        self._limits = limits
        self._tenant_max = tenant_max_inflight

    async def ingest_next(self) -> bool:
        """Process one pending document; False when none is waiting."""
        doc = await self._queue.claim(tenant_max_inflight=self._tenant_max)
        if doc is None:
            return False
        try:
            await self._ingest(doc)
        except DocumentRefused as exc:
            log.warning("document_refused", document_id=doc.document_id, reason=str(exc))
            await self._queue.finish(doc.document_id, error=str(exc))
        except asyncio.CancelledError:
            raise  # the claim goes stale and another worker takes the document over
        except Exception as exc:  # embedding endpoint down, etc.: reported on the document
            log.exception("ingestion_failed", document_id=doc.document_id)
            await self._queue.finish(doc.document_id, error=f"{type(exc).__name__}: {exc}")
        return True

    async def _ingest(self, doc: PendingDocument) -> None:
        text = await asyncio.to_thread(extract_text, doc.file_name, doc.content, self._limits)
        pieces = split_into_chunks(text)
        if not pieces:
            raise UnsupportedDocument(f"{doc.file_name}: no text found")
        await self._check_chunks(doc, len(pieces))
        ids = await self._queue.start(doc, pieces)
        if self._embedder is not None:
            for start in range(0, len(pieces), self._batch):
                batch = pieces[start : start + self._batch]
                vectors = await self._embedder.embed(batch)
                done = start + len(batch)
                await self._queue.save_embeddings(doc, ids[start:done], vectors, done)
        await self._queue.finish(doc.document_id)
        log.info("document_ingested", document_id=doc.document_id, chunks=len(pieces))

    async def _check_chunks(self, doc: PendingDocument, count: int) -> None:
        """Refuse a document with more chunks than a document or its tenant may have."""
        limits = self._limits
        if count > limits.max_chunks:
            raise DocumentTooLarge(
                f"{doc.file_name}: {count:,} chunks, over the limit of "
                f"{limits.max_chunks:,} per document"
            )
        stored = await self._queue.tenant_chunks(doc.tenant_id, besides=doc.document_id)
        if stored + count > limits.tenant_max_chunks:
            raise DocumentTooLarge(
                f"{doc.file_name}: {count:,} chunks would bring the tenant's knowledge to "
                f"{stored + count:,}, over its limit of {limits.tenant_max_chunks:,}"
            )
