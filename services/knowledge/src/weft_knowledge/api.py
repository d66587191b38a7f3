"""knowledge's internal routes: knowledge bases, documents, chunks and search.

Tenant routes (every route but the titles and lookup routes' service form) want a request
credential with the ``knowledge`` audience (``InternalAuth``): the gateway's API
credential (public knowledge routes, question origins) or a turn's (tool-exec's
knowledge tools). The tenant is the credential's (a request naming another is 403), and a
credential of a KB-restricted key (SPEC A-09) reaches only its knowledge bases: whatever
a request names is narrowed to them (``narrowest``), and a document or chunk outside
them is the 404 of a missing one.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import asdict
from typing import Annotated, Any
from urllib.parse import quote

from fastapi import APIRouter, HTTPException, Query, Request, Response
from pydantic import BaseModel, Field
from weft_contracts import KnowledgeTitle
from weft_contracts.knowledge import DocumentInfo
from weft_platform.internal_auth import SystemRoute, caller_knowledge_bases, narrowest
from weft_storage.knowledge.documents import DocumentReader
from weft_storage.knowledge.ingest import IngestionQueue, new_document_id
from weft_storage.knowledge.store import KnowledgeStore
from weft_tool_catalog.specs import SearchMode
from weft_tools.ranking import NoIndexInScope

from weft_knowledge.search import KnowledgeSearch
from weft_knowledge.titles import KnowledgeDirectory
from weft_knowledge.usage import DocumentUsage

DONE = ("ready", "failed")
TEXT_SUFFIXES = (".txt", ".md")
FILE_NAME_HEADER = "X-Weft-File-Name"
"""The header naming the file of ``GET /internal/documents/{doc_id}/file``."""

TITLES_ROUTE = "/internal/document-titles"
LOOKUP_ROUTE = "/internal/knowledge-bases/lookup"
RETRIEVAL_ROUTES = (
    "/internal/search",
    "/internal/chunks",
    "/internal/documents",
    "/internal/documents/{doc_id}",
    "/internal/documents/{doc_id}/chunks",
    "/internal/documents/{doc_id}/file",
)
"""The knowledge tools' reads. A shared agent's tools read its owner's knowledge bases
(SPEC E-26) with tool-exec's service credential (``knowledge:retrieve``), the turn's
naming the caller's tenant; every other call presents a request credential."""
RETRIEVE = SystemRoute("knowledge:retrieve", frozenset({"tool-exec"}), also_requests=True)
SYSTEM_ROUTES = {
    **dict.fromkeys(RETRIEVAL_ROUTES, RETRIEVE),
    # Suggestion settings (agent-config, for the suggestions service): no request behind.
    TITLES_ROUTE: SystemRoute("knowledge:titles.read", frozenset({"agent-config", "operator"})),
    # agent-config's KB guard (SPEC A-07) and placeholder names, while it resolves or saves.
    LOOKUP_ROUTE: SystemRoute("knowledge:bases.read", frozenset({"agent-config", "operator"})),
}
"""Routes that name any tenant: a service credential with their scope (the retrieval
routes: a request credential too)."""


class KnowledgeBaseCreate(BaseModel):
    """Body of ``POST /internal/knowledge-bases``."""

    tenant_id: str = Field(min_length=1, max_length=128)
    name: str = Field(min_length=1, max_length=200)
    description: str = Field(default="", max_length=2000)
    wiki_enabled: bool = False
    """Pages generated from its documents and the wiki tools (SPEC T-18)."""


class TextDocument(BaseModel):
    """Body of ``POST /internal/knowledge-bases/{kb_id}/documents`` (text or Markdown)."""

    tenant_id: str = Field(min_length=1, max_length=128)
    user_id: str = Field(default="", max_length=128)
    title: str = Field(min_length=1, max_length=500)
    content: str = Field(min_length=1, max_length=5_000_000)
    file_name: str = Field(default="", max_length=500)


class ChunkLookup(BaseModel):
    """Body of ``POST /internal/chunks``."""

    tenant_id: str = Field(min_length=1, max_length=128)
    knowledge_base_ids: list[str] = Field(default_factory=list, max_length=100)
    chunk_ids: list[str] = Field(max_length=500)


class SearchRequest(BaseModel):
    """Body of ``POST /internal/search`` (the ``search_knowledge`` pipeline)."""

    tenant_id: str = Field(min_length=1, max_length=128)
    knowledge_base_ids: list[str] = Field(default_factory=list, max_length=100)
    query: str = Field(min_length=1, max_length=10_000)
    mode: SearchMode = SearchMode.HYBRID
    limit: int = Field(default=5, ge=1, le=50)


class BasesLookup(BaseModel):
    """Body of ``POST /internal/knowledge-bases/lookup``."""

    tenant_id: str = Field(min_length=1, max_length=128)
    knowledge_base_ids: list[str] = Field(default_factory=list, max_length=500)
    limit: int = Field(default=100, ge=1, le=500)


def scope_of(request: Request, named: list[str] | None) -> list[str] | None:
    """The knowledge bases a request may reach: what it names (None or empty: all of
    them) narrowed to its credential's; None: every KB of the tenant."""
    return narrowest(named or None, caller_knowledge_bases(request))


def as_filter(scope: list[str] | None) -> list[str] | None:
    """A scope as the storage filters take it (empty: the whole tenant); None when a
    restricted credential named only KBs outside its list (nothing is reachable)."""
    if scope is None:
        return []
    return scope or None


def knowledge_router(
    store: KnowledgeStore,
    reader: DocumentReader,
    queue: IngestionQueue,
    search: KnowledgeSearch,
    usage: DocumentUsage,
    directory: KnowledgeDirectory,
    *,
    document_wait_s: float,
) -> APIRouter:
    """The internal routes."""
    router = APIRouter(tags=["knowledge"])

    async def require_kb(request: Request, tenant_id: str, kb_id: str) -> None:
        reach = scope_of(request, None)
        if reach is not None and kb_id not in reach:
            raise HTTPException(404, f"knowledge base {kb_id!r} not found")
        if not await store.knowledge_base_exists(tenant_id, kb_id):
            raise HTTPException(404, f"knowledge base {kb_id!r} not found")

    async def meter(tenant_id: str, user_id: str, doc_id: str, size: int) -> None:
        # Before the document exists: a document is never queued unmetered; the route is
        # idempotent on the id, so it counts once.
        if not await usage.record(
            tenant_id=tenant_id, document_id=doc_id, user_id=user_id, size_bytes=size
        ):
            raise HTTPException(503, "memory unavailable (usage); retry", {"Retry-After": "2"})

    @router.post("/internal/knowledge-bases", status_code=201)
    async def create_kb(request: Request, body: KnowledgeBaseCreate) -> dict[str, Any]:
        if caller_knowledge_bases(request) is not None:
            raise HTTPException(403, "a KB-restricted credential cannot create knowledge bases")
        kb_id = await store.create_knowledge_base(
            body.tenant_id, body.name, body.description, wiki_enabled=body.wiki_enabled
        )
        return {"id": kb_id, "name": body.name, "wiki_enabled": body.wiki_enabled}

    @router.get("/internal/knowledge-bases")
    async def list_kbs(request: Request, tenant_id: str) -> list[dict[str, Any]]:
        reach = scope_of(request, None)
        found = await store.list_knowledge_bases(tenant_id)
        return [kb for kb in found if reach is None or kb["id"] in reach]

    @router.post(LOOKUP_ROUTE)
    async def lookup_kbs(body: BasesLookup) -> list[dict[str, Any]]:
        """The tenant's KBs in the order named (its first ``limit`` when none), with
        their capabilities; 404 naming the ids that are not the tenant's."""
        found = await directory.scoped(body.tenant_id, body.knowledge_base_ids, body.limit)
        missing = [kb for kb in body.knowledge_base_ids if kb not in {f["id"] for f in found}]
        if missing:
            raise HTTPException(404, f"knowledge bases not found: {missing}")
        return found

    @router.get("/internal/knowledge-bases/{kb_id}")
    async def get_kb(request: Request, tenant_id: str, kb_id: str) -> dict[str, str]:
        await require_kb(request, tenant_id, kb_id)
        return {"id": kb_id}

    @router.post("/internal/knowledge-bases/{kb_id}/documents")
    async def add_text(
        request: Request,
        kb_id: str,
        body: TextDocument,
        wait_s: Annotated[float, Query(ge=0)] = 0.0,
    ) -> dict[str, Any]:
        """Queue a text (the same fair queue as files) and wait up to ``wait_s`` (at
        most the service's ``document_wait_s``) for it: the document as it is then."""
        await require_kb(request, body.tenant_id, kb_id)
        name = body.file_name
        content = body.content.encode()
        doc_id = new_document_id()
        await meter(body.tenant_id, body.user_id, doc_id, len(content))
        await queue.enqueue_file(
            body.tenant_id, kb_id, title=body.title, file_name=name, content=content,
            content_type="text/markdown", doc_id=doc_id,
            parse_as=name if name.lower().endswith(TEXT_SUFFIXES) else "document.md",
        )  # fmt: skip
        info = await _ingested(reader, body.tenant_id, kb_id, doc_id, min(wait_s, document_wait_s))
        if info is None:  # deleted while it waited
            raise HTTPException(404, f"document {doc_id!r} not found")
        return asdict(info)

    @router.post("/internal/knowledge-bases/{kb_id}/files", status_code=202)
    async def add_file(
        request: Request,
        kb_id: str,
        tenant_id: str,
        file_name: Annotated[str, Query(min_length=1, max_length=500)],
        user_id: str = "",
        title: Annotated[str, Query(max_length=500)] = "",
        content_type: Annotated[str, Query(max_length=100)] = "",
    ) -> dict[str, Any]:
        """Queue a file (the request body, as is); workers parse, chunk and embed it."""
        await require_kb(request, tenant_id, kb_id)
        content = await request.body()
        if not content:
            raise HTTPException(422, "the file is empty")
        doc_id = new_document_id()
        await meter(tenant_id, user_id, doc_id, len(content))
        await queue.enqueue_file(
            tenant_id, kb_id, title=title or file_name, file_name=file_name, content=content,
            content_type=content_type, doc_id=doc_id,
        )  # fmt: skip
        return {"id": doc_id, "knowledge_base_id": kb_id, "status": "pending"}

    @router.get("/internal/documents")
    async def list_documents(
        request: Request,
        tenant_id: str,
        kb_id: Annotated[list[str] | None, Query()] = None,
        keyword: Annotated[str, Query(max_length=200)] = "",
        page: Annotated[int, Query(ge=1)] = 1,
        size: Annotated[int, Query(ge=1, le=100)] = 20,
    ) -> dict[str, Any]:
        """Documents in scope, newest first, with their ingestion status and progress."""
        kbs = as_filter(scope_of(request, kb_id))
        if kbs is None:
            return {"total": 0, "items": []}
        total, docs = await reader.list_documents(
            tenant_id, kbs, keyword=keyword, page=page, size=size
        )
        return {"total": total, "items": [asdict(d) for d in docs]}

    @router.get("/internal/documents/{doc_id}")
    async def get_document(
        request: Request,
        tenant_id: str,
        doc_id: str,
        kb_id: Annotated[list[str] | None, Query()] = None,
    ) -> dict[str, Any]:
        """One document in scope (its knowledge base included), or 404."""
        kbs = as_filter(scope_of(request, kb_id))
        info = None if kbs is None else await reader.document(tenant_id, kbs, doc_id)
        if info is None:
            raise HTTPException(404, f"document {doc_id!r} not found")
        return asdict(info)

    @router.get("/internal/documents/{doc_id}/chunks")
    async def document_chunks(
        request: Request,
        tenant_id: str,
        doc_id: str,
        start: Annotated[int, Query(ge=0)] = 0,
        limit: Annotated[int, Query(ge=1, le=5000)] = 5000,
    ) -> list[dict[str, Any]]:
        """Chunks of a document in scope, in reading order from ``start``."""
        await require_document(request, tenant_id, doc_id)
        rows = await reader.chunks(tenant_id, doc_id, start=start, limit=limit)
        return [asdict(r) for r in rows]

    @router.get("/internal/documents/{doc_id}/file")
    async def document_file(request: Request, tenant_id: str, doc_id: str) -> Response:
        """The uploaded file of a document in scope (the name in ``X-Weft-File-Name``)."""
        await require_document(request, tenant_id, doc_id)
        found = await reader.file(tenant_id, doc_id)
        if found is None:
            raise HTTPException(404, f"document {doc_id!r} has no file")
        name, content = found
        headers = {FILE_NAME_HEADER: quote(name, safe="")}
        return Response(content, media_type="application/octet-stream", headers=headers)

    async def require_document(request: Request, tenant_id: str, doc_id: str) -> None:
        kbs = as_filter(scope_of(request, None))
        if kbs is None or await reader.document(tenant_id, kbs, doc_id) is None:
            raise HTTPException(404, f"document {doc_id!r} not found")

    @router.post("/internal/chunks")
    async def chunks(request: Request, body: ChunkLookup) -> list[dict[str, Any]]:
        """Chunks by id with their document titles, in scope, in the order asked."""
        kbs = as_filter(scope_of(request, body.knowledge_base_ids))
        if kbs is None:
            return []
        hits = await reader.chunks_by_ids(body.tenant_id, kbs, body.chunk_ids)
        return [asdict(h) for h in hits]

    @router.post("/internal/search")
    async def run_search(request: Request, body: SearchRequest) -> dict[str, Any]:
        """The ``search_knowledge`` pipeline over the KBs in scope; 409 when none of
        them has indexed content (the tool tells the model so)."""
        kbs = as_filter(scope_of(request, body.knowledge_base_ids))
        try:
            if kbs is None:
                raise NoIndexInScope("no knowledge base in scope has indexed content")
            report = await search.search(body.tenant_id, kbs, body.query, body.mode, body.limit)
        except NoIndexInScope as exc:
            raise HTTPException(409, str(exc)) from None
        return {
            "results": [asdict(c) for c in report.results],
            "requested_mode": report.requested_mode.value,
            "mode_fallbacks": report.mode_fallbacks,
            "rerank_rejected": report.rerank_rejected,
        }

    @router.get(TITLES_ROUTE)
    async def titles(
        tenant_id: str,
        kb_id: Annotated[list[str] | None, Query()] = None,
        limit: Annotated[int, Query(ge=1, le=50)] = 8,
    ) -> list[KnowledgeTitle]:
        """The newest ready documents of the named KBs (all the tenant's when none)."""
        return await directory.titles(tenant_id, kb_id or [], limit)

    return router


async def _ingested(
    reader: DocumentReader, tenant_id: str, kb_id: str, doc_id: str, wait_s: float
) -> DocumentInfo | None:
    """The document once ready or failed, or as it is when ``wait_s`` ran out."""
    deadline, pause = time.monotonic() + wait_s, 0.02
    while True:
        info = await reader.document(tenant_id, [kb_id], doc_id)
        if info is None or info.status in DONE or time.monotonic() + pause > deadline:
            return info
        await asyncio.sleep(pause)
        pause = min(pause * 2, 0.25)
