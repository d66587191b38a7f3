"""The ingestion queue: uploaded files wait in PostgreSQL until a worker turns them into
chunks and embeddings (SPEC T-07 ingestion; asynchronous, progress reported).

A document is ``pending`` -> ``processing`` -> ``ready`` | ``failed``. Workers claim one
document at a time with ``FOR UPDATE SKIP LOCKED``, so any number of ingestion workers
(``python -m weft_knowledge worker``) can ingest without a coordinator; a claim older
than ``stale_after_s`` (its worker died) is taken over. Progress (``chunk_count``,
``embedded_count``) is visible while it runs, and searches never wait for it: chunks
become searchable batch by batch.

Queuing a document, and ending one (its tenant's share frees), notifies
:data:`INGESTION_CHANNEL` (PostgreSQL ``NOTIFY``, sent at
commit), so idle workers listening on it (:class:`weft_storage.listen.ChannelWakeups`)
claim it at once rather than at their next poll.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import delete, func, literal, or_, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from ulid import ULID

from weft_storage.knowledge.documents import DocumentOrigin
from weft_storage.knowledge.fair_claims import running_per_tenant
from weft_storage.knowledge.models import Chunk, Document, KnowledgeBase
from weft_storage.knowledge.models_files import DocumentFile
from weft_storage.knowledge.models_graph import GraphExtraction
from weft_storage.knowledge.wiki_issues import queue_generation

INGESTION_CHANNEL = "weft_ingestion"
"""The ``NOTIFY`` channel of queued documents; its payload is empty (a wake-up, no data)."""


@dataclass(frozen=True, kw_only=True)
class PendingDocument:
    """A claimed document and its file."""

    document_id: str
    tenant_id: str
    knowledge_base_id: str
    file_name: str
    content: bytes


def new_document_id() -> str:
    """A new document id (the knowledge service meters a document by it before queuing)."""
    return f"doc_{ULID()}"


QUEUED_STATES = ("pending", "processing")
"""A document's states while it is in the ingestion queue."""


class IngestionQueue:
    """Queue operations on the documents table."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession], *, stale_after_s: float = 300):
        self._sessions = sessions
        self._stale = timedelta(seconds=stale_after_s)

    async def depth(self) -> dict[str, int]:
        """Documents waiting to be ingested, by state (``pending``, ``processing``): what
        the ingestion queue-depth metric reports."""
        query = (
            select(Document.status, func.count())
            .where(Document.status.in_(QUEUED_STATES))
            .group_by(Document.status)
        )
        async with self._sessions() as s:
            found = {str(status): int(n) for status, n in (await s.execute(query)).all()}
        return {state: found.get(state, 0) for state in QUEUED_STATES}

    async def enqueue_file(
        self,
        tenant_id: str,
        kb_id: str,
        *,
        title: str,
        file_name: str,
        content: bytes,
        content_type: str = "",
        parse_as: str = "",
        doc_id: str | None = None,
        tags: list[str] | None = None,
        origin: DocumentOrigin | None = None,
    ) -> str:
        """Store the file as a ``pending`` document with its ``tags``; return its id
        (``doc_id``, or a new one: see :func:`new_document_id`). ``parse_as`` is the name
        its parser goes by when ``file_name`` (kept as the document's) does not tell its
        type, as for a text posted as JSON; ``origin``: the session and budgets the upload
        named (its wiki and graph work reads them). Metering the document is the caller's (usage
        is memory's table)."""
        doc_id = doc_id or new_document_id()
        async with self._sessions.begin() as s:
            s.add(
                Document(
                    id=doc_id,
                    tenant_id=tenant_id,
                    knowledge_base_id=kb_id,
                    title=title,
                    file_name=file_name,
                    status="pending",
                    content_type=content_type,
                    size_bytes=len(content),
                    tags=list(tags or []),
                    session_id=origin.session_id if origin else None,
                    budget_tokens_per_minute=origin.tokens_per_minute if origin else None,
                    budget_tokens_per_day=origin.tokens_per_day if origin else None,
                )
            )
            await s.flush()
            s.add(
                DocumentFile(
                    document_id=doc_id,
                    tenant_id=tenant_id,
                    file_name=parse_as or file_name,
                    content_type=content_type,
                    content=content,
                )
            )
            await notify_workers(s)
        return doc_id

    async def claim(self, *, tenant_max_inflight: int | None = None) -> PendingDocument | None:
        """Take a pending (or abandoned) document, or None.

        Fair across tenants: the document of the tenant with the fewest documents being
        ingested now goes first (then the oldest), so one tenant's backlog or big document
        never holds every worker; with ``tenant_max_inflight`` a tenant that many
        documents in progress is passed over. The count is read without locking other
        tenants' rows, so two workers claiming at the same instant may each admit one
        document over the cap: a soft cap, off by at most the number of workers.
        """
        stale = datetime.now(UTC) - self._stale
        waiting = or_(
            Document.status == "pending",
            (Document.status == "processing") & (Document.updated_at < stale),
        )
        in_progress = running_per_tenant(Document, "processing", stale)
        stmt = (
            select(Document, DocumentFile)
            .join(DocumentFile, DocumentFile.document_id == Document.id)
            .where(waiting)
            .order_by(in_progress, Document.created_at)
            .limit(1)
            .with_for_update(of=Document, skip_locked=True)
        )
        if tenant_max_inflight is not None:
            stmt = stmt.where(in_progress < tenant_max_inflight)
        async with self._sessions.begin() as s:
            row = (await s.execute(stmt)).first()
            if row is None:
                return None
            doc, file = row
            doc.status, doc.updated_at, doc.error = "processing", func.now(), None
            return PendingDocument(
                document_id=doc.id,
                tenant_id=doc.tenant_id,
                knowledge_base_id=doc.knowledge_base_id,
                file_name=file.file_name,
                content=file.content,
            )

    async def tenant_chunks(self, tenant_id: str, *, besides: str) -> int:
        """Chunks the tenant's documents hold now, ``besides`` (a document being re-read)
        aside."""
        stmt = select(func.count()).where(
            Chunk.tenant_id == tenant_id, Chunk.document_id != besides
        )
        async with self._sessions() as s:
            return int((await s.execute(stmt)).scalar_one())

    async def start(self, doc: PendingDocument, pieces: list[str]) -> list[str]:
        """Replace the document's chunks with ``pieces`` (keyword-searchable at once)."""
        ids = [f"chk_{ULID()}" for _ in pieces]
        async with self._sessions.begin() as s:
            await s.execute(delete(Chunk).where(Chunk.document_id == doc.document_id))
            s.add_all(
                Chunk(
                    id=cid,
                    tenant_id=doc.tenant_id,
                    knowledge_base_id=doc.knowledge_base_id,
                    document_id=doc.document_id,
                    position=i,
                    content=piece,
                )
                for i, (cid, piece) in enumerate(zip(ids, pieces, strict=True))
            )
            await self._progress(s, doc.document_id, chunk_count=len(pieces), embedded_count=0)
        return ids

    async def save_embeddings(
        self, doc: PendingDocument, chunk_ids: list[str], vectors: list[list[float]], done: int
    ) -> None:
        """Store one batch of embeddings and the progress."""
        async with self._sessions.begin() as s:
            for cid, vector in zip(chunk_ids, vectors, strict=True):
                await s.execute(update(Chunk).where(Chunk.id == cid).values(embedding=vector))
            await self._progress(s, doc.document_id, embedded_count=done)

    async def finish(self, document_id: str, *, error: str | None = None) -> None:
        """Mark the document ``ready`` or ``failed``; its tenant's share frees, so idle
        workers are woken for a document they passed over."""
        async with self._sessions.begin() as s:
            status = "failed" if error else "ready"
            await self._progress(s, document_id, status=status, error=error)
            if not error:
                await _share_knowledge_base(s, document_id)
                await queue_graph_extraction(s, document_id)
                # A wiki KB's document gets its pages written (SPEC T-18).
                await queue_generation(s, document_id)
            await notify_workers(s)

    @staticmethod
    async def _progress(s: AsyncSession, document_id: str, **values: object) -> None:
        await s.execute(
            update(Document)
            .where(Document.id == document_id)
            .values(updated_at=func.now(), **values)
        )


async def _share_knowledge_base(s: AsyncSession, document_id: str) -> None:
    """Lock the document's KB row for share before its work is queued: a switch of its
    wiki or graph (``KnowledgeSwitches``, which locks it for update) is waited for, and the
    queueing's next statements see the switch's outcome (READ COMMITTED takes a snapshot
    per statement). Otherwise a document turning ready while its KB is switched on could
    be queued by neither: the switch's backfill sees it not ready, its own queueing sees
    the switch off."""
    await s.execute(
        select(KnowledgeBase.id)
        .join(Document, Document.knowledge_base_id == KnowledgeBase.id)
        .where(Document.id == document_id)
        .with_for_update(read=True, of=KnowledgeBase)
    )


async def queue_graph_extraction(s: AsyncSession, document_id: str) -> None:
    """Queue the document's graph extraction when its KB has a graph (SPEC T-10), in the
    transaction that makes it ready: a document of a graph KB is never left unqueued. A
    re-ingested document is extracted again from scratch."""
    kb = select(
        Document.id, Document.tenant_id, Document.knowledge_base_id, literal("pending"),
        literal(0),
    ).join(KnowledgeBase, KnowledgeBase.id == Document.knowledge_base_id).where(
        Document.id == document_id, KnowledgeBase.graph_enabled.is_(True)
    )  # fmt: skip
    columns = ["document_id", "tenant_id", "knowledge_base_id", "status", "attempts"]
    stmt = pg_insert(GraphExtraction).from_select(columns, kb)
    await s.execute(
        stmt.on_conflict_do_update(
            index_elements=["document_id"],
            set_={"status": "pending", "attempts": 0, "error": None, "not_before": func.now(),
                  "updated_at": func.now()},
        )
    )  # fmt: skip


async def notify_workers(s: AsyncSession) -> None:
    """Wake the listening workers once the transaction commits."""
    await s.execute(select(func.pg_notify(INGESTION_CHANNEL, "")))
