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
from typing import Annotated, Any, Literal
from urllib.parse import quote

import structlog
from fastapi import APIRouter, HTTPException, Query, Request, Response
from pydantic import BaseModel, ConfigDict, Field
from weft_contracts import KnowledgeTitle
from weft_contracts.knowledge import DocumentInfo
from weft_platform.internal_auth import SystemRoute, caller_knowledge_bases, narrowest
from weft_storage.knowledge.documents import DocumentOrigin, DocumentReader
from weft_storage.knowledge.faq import FAQ_KIND, FaqStore
from weft_storage.knowledge.graph import GraphStore
from weft_storage.knowledge.ingest import IngestionQueue, new_document_id
from weft_storage.knowledge.store import KnowledgeStore
from weft_storage.knowledge.switches import KnowledgeSwitches
from weft_tool_catalog.specs import SearchMode
from weft_tools.embeddings import Embedder
from weft_tools.ingestion_limits import IngestionLimits
from weft_tools.ranking import NoIndexInScope

from weft_knowledge.faq_api import faq_router
from weft_knowledge.search import KnowledgeSearch
from weft_knowledge.titles import KnowledgeDirectory
from weft_knowledge.usage import DocumentUsage

log = structlog.get_logger(__name__)

DONE = ("ready", "failed")
TEXT_SUFFIXES = (".txt", ".md")
FILE_NAME_HEADER = "X-Weft-File-Name"
"""The header naming the file of ``GET /internal/documents/{doc_id}/file``."""

TITLES_ROUTE = "/internal/document-titles"
LOOKUP_ROUTE = "/internal/knowledge-bases/lookup"
LISTING_ROUTE = "/internal/documents/listing"
RETRIEVAL_ROUTES = (
    "/internal/search",
    LISTING_ROUTE,
    "/internal/chunks",
    "/internal/documents",
    "/internal/documents/{doc_id}",
    "/internal/documents/{doc_id}/chunks",
    "/internal/documents/{doc_id}/file",
    "/internal/graph/query",
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
    kind: Literal["documents", "faq"] = "documents"
    graph_enabled: bool = False
    """Extract entities and relations of its documents at ingestion (SPEC T-10)."""
    wiki_enabled: bool = False
    """Pages generated from its documents and the wiki tools (SPEC T-18)."""


Tag = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[\w.:-]+$")]
"""A document tag: one word of letters, digits, ``_``, ``.``, ``:`` or ``-``."""


class KnowledgeBaseSwitches(BaseModel):
    """Body of ``PATCH /internal/knowledge-bases/{kb_id}``: switches to change (absent:
    unchanged), and the tenant's budgets for the backfilled documents' work."""

    model_config = ConfigDict(extra="forbid")

    tenant_id: str = Field(min_length=1, max_length=128)
    wiki_enabled: bool | None = None
    graph_enabled: bool | None = None
    budget_tokens_per_minute: Annotated[int, Field(ge=0, le=10**15)] | None = None
    budget_tokens_per_day: Annotated[int, Field(ge=0, le=10**15)] | None = None


class DocumentTags(BaseModel):
    """Body of ``PUT /internal/documents/{doc_id}/tags``."""

    tenant_id: str = Field(min_length=1, max_length=128)
    tags: list[Tag] = Field(max_length=32)


class SearchTargetsRequest(BaseModel):
    """Body of ``POST /internal/search-targets`` (SPEC A-11: a request's mentions)."""

    tenant_id: str = Field(min_length=1, max_length=128)
    knowledge_base_ids: list[str] = Field(default_factory=list, max_length=100)
    document_ids: list[str] = Field(default_factory=list, max_length=50)
    tags: list[Tag] = Field(default_factory=list, max_length=20)


SessionId = Annotated[str, Field(pattern=r"^[A-Za-z0-9_.:-]{1,128}$")]
"""The session an upload names (its wiki and graph progress notices go there)."""
BudgetLimit = Annotated[int, Field(ge=0, le=10**15)]
"""One of the tenant's token budgets as the gateway admitted the upload (0: unlimited)."""


class UploadOrigin(BaseModel):
    """What the gateway says of an upload: the caller's session it checked, and the
    tenant's budgets (``weft_gateway.upload_origin``)."""

    session_id: SessionId | None = None
    budget_tokens_per_minute: BudgetLimit | None = None
    budget_tokens_per_day: BudgetLimit | None = None

    def origin(self) -> DocumentOrigin:
        """As the queue stores it."""
        return DocumentOrigin(
            session_id=self.session_id,
            tokens_per_minute=self.budget_tokens_per_minute,
            tokens_per_day=self.budget_tokens_per_day,
        )


class TextDocument(UploadOrigin):
    """Body of ``POST /internal/knowledge-bases/{kb_id}/documents`` (text or Markdown)."""

    tenant_id: str = Field(min_length=1, max_length=128)
    user_id: str = Field(default="", max_length=128)
    title: str = Field(min_length=1, max_length=500)
    content: str = Field(min_length=1, max_length=5_000_000)
    file_name: str = Field(default="", max_length=500)
    tags: list[Tag] = Field(default_factory=list, max_length=32)


class DocumentListing(BaseModel):
    """Body of ``POST /internal/documents/listing``: ``list_documents`` under a mention
    (SPEC A-11), its documents named in the body (too many for a query string)."""

    model_config = ConfigDict(extra="forbid")

    tenant_id: str = Field(min_length=1, max_length=128)
    knowledge_base_ids: list[Annotated[str, Field(max_length=64)]] = Field(
        default_factory=list, max_length=100
    )
    document_ids: list[Annotated[str, Field(max_length=64)]] = Field(max_length=500)
    keyword: str = Field(default="", max_length=200)
    page: int = Field(default=1, ge=1, le=1_000_000)
    size: int = Field(default=20, ge=1, le=100)


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
    document_ids: list[str] = Field(
        default_factory=list, max_length=500, description="SPEC A-11: a mention's targets."
    )
    faq_tags: list[Tag] = Field(
        default_factory=list, max_length=20, description="SPEC A-11: a mention's FAQ tags."
    )
    faq_score_boost: float | None = Field(
        default=None, ge=0, le=1, description="SPEC C-04: FAQ priority with this boost."
    )


class GraphQuery(BaseModel):
    """Body of ``POST /internal/graph/query`` (``query_knowledge_graph``, SPEC T-10)."""

    model_config = ConfigDict(extra="forbid")

    tenant_id: str = Field(min_length=1, max_length=128)
    knowledge_base_ids: list[Annotated[str, Field(min_length=1, max_length=64)]] = Field(
        min_length=1, max_length=10
    )
    query: str = Field(min_length=1, max_length=2000)


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
    graph: GraphStore,
    *,
    document_wait_s: float,
    faq: FaqStore | None = None,
    embedder: Embedder | None = None,
    limits: IngestionLimits | None = None,
    switches: KnowledgeSwitches | None = None,
) -> APIRouter:
    """The internal routes."""
    switches = switches or KnowledgeSwitches(store.sessions)
    router = APIRouter(tags=["knowledge"])

    async def require_kb(request: Request, tenant_id: str, kb_id: str) -> None:
        reach = scope_of(request, None)
        if reach is not None and kb_id not in reach:
            raise HTTPException(404, f"knowledge base {kb_id!r} not found")
        if not await store.knowledge_base_exists(tenant_id, kb_id):
            raise HTTPException(404, f"knowledge base {kb_id!r} not found")

    async def require_documents_kb(request: Request, tenant_id: str, kb_id: str) -> None:
        await require_kb(request, tenant_id, kb_id)
        if await store.knowledge_base_kind(tenant_id, kb_id) == FAQ_KIND:
            raise HTTPException(
                409, f"knowledge base {kb_id!r} is an FAQ base: add entries, not documents"
            )

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
            body.tenant_id, body.name, body.description, kind=body.kind,
            graph_enabled=body.graph_enabled, wiki_enabled=body.wiki_enabled,
        )  # fmt: skip
        return {"id": kb_id, "name": body.name, "kind": body.kind,
                "graph_enabled": body.graph_enabled,
                "wiki_enabled": body.wiki_enabled}  # fmt: skip

    @router.get("/internal/knowledge-bases")
    async def list_kbs(request: Request, tenant_id: str) -> list[dict[str, Any]]:
        """The tenant's KBs in reach, with their switches and capabilities."""
        reach = scope_of(request, None)
        found = await directory.listed(tenant_id)
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
    async def get_kb(request: Request, tenant_id: str, kb_id: str) -> dict[str, Any]:
        """One KB in reach with its switches, capabilities and graph progress (an FAQ
        base: its entries' embedding progress)."""
        await require_kb(request, tenant_id, kb_id)
        (view,) = await directory.scoped(tenant_id, [kb_id])
        if view["graph_enabled"]:
            view["graph"] = await graph.progress(tenant_id, kb_id)
        if faq is not None and view.get("kind") == FAQ_KIND:
            view["faq"] = await faq.embedding_progress(tenant_id, kb_id)
        return view

    @router.patch("/internal/knowledge-bases/{kb_id}")
    async def change_kb(
        request: Request, kb_id: str, body: KnowledgeBaseSwitches
    ) -> dict[str, Any]:
        """Switch the KB's wiki or graph on or off; switched on, its ready documents are
        queued for the work (``backfilled``). A KB-restricted credential may not (it
        cannot create KBs either); an FAQ base has no documents to make either from."""
        if caller_knowledge_bases(request) is not None:
            raise HTTPException(403, "a KB-restricted credential cannot change knowledge bases")
        if body.wiki_enabled is None and body.graph_enabled is None:
            raise HTTPException(422, "name wiki_enabled or graph_enabled")
        await require_kb(request, body.tenant_id, kb_id)
        turning_on = body.wiki_enabled or body.graph_enabled
        if turning_on and await store.knowledge_base_kind(body.tenant_id, kb_id) == FAQ_KIND:
            raise HTTPException(409, f"knowledge base {kb_id!r} is an FAQ base: no wiki or graph")
        origin = DocumentOrigin(
            session_id=None, tokens_per_minute=body.budget_tokens_per_minute,
            tokens_per_day=body.budget_tokens_per_day,
        )  # fmt: skip
        changed = await switches.change(
            body.tenant_id, kb_id, wiki=body.wiki_enabled, graph=body.graph_enabled,
            origin=origin,
        )  # fmt: skip
        if changed is None:  # deleted meanwhile
            raise HTTPException(404, f"knowledge base {kb_id!r} not found")
        (view,) = await directory.scoped(body.tenant_id, [kb_id])
        view["backfilled"] = {"wiki": changed.wiki_backfilled, "graph": changed.graph_backfilled}
        return view

    @router.post("/internal/knowledge-bases/{kb_id}/documents")
    async def add_text(
        request: Request,
        kb_id: str,
        body: TextDocument,
        wait_s: Annotated[float, Query(ge=0)] = 0.0,
    ) -> dict[str, Any]:
        """Queue a text (the same fair queue as files) and wait up to ``wait_s`` (at
        most the service's ``document_wait_s``) for it: the document as it is then."""
        await require_documents_kb(request, body.tenant_id, kb_id)
        name = body.file_name
        content = body.content.encode()
        doc_id = new_document_id()
        await meter(body.tenant_id, body.user_id, doc_id, len(content))
        await queue.enqueue_file(
            body.tenant_id, kb_id, title=body.title, file_name=name, content=content,
            content_type="text/markdown", doc_id=doc_id, tags=body.tags,
            parse_as=name if name.lower().endswith(TEXT_SUFFIXES) else "document.md",
            origin=body.origin(),
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
        tag: Annotated[list[Tag] | None, Query(max_length=32)] = None,
        session_id: Annotated[SessionId | None, Query()] = None,
        budget_tokens_per_minute: Annotated[BudgetLimit | None, Query()] = None,
        budget_tokens_per_day: Annotated[BudgetLimit | None, Query()] = None,
    ) -> dict[str, Any]:
        """Queue a file (the request body, as is); workers parse, chunk and embed it."""
        origin = UploadOrigin(
            session_id=session_id, budget_tokens_per_minute=budget_tokens_per_minute,
            budget_tokens_per_day=budget_tokens_per_day,
        ).origin()  # fmt: skip
        await require_documents_kb(request, tenant_id, kb_id)
        content = await request.body()
        if not content:
            raise HTTPException(422, "the file is empty")
        doc_id = new_document_id()
        await meter(tenant_id, user_id, doc_id, len(content))
        await queue.enqueue_file(
            tenant_id, kb_id, title=title or file_name, file_name=file_name, content=content,
            content_type=content_type, doc_id=doc_id, tags=tag or [], origin=origin,
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

    @router.post(LISTING_ROUTE)
    async def list_mentioned_documents(request: Request, body: DocumentListing) -> dict[str, Any]:
        """``list_documents`` under a mention (SPEC A-11): only the named documents in
        scope, filtered before the page is cut (the total counts them alone)."""
        kbs = as_filter(scope_of(request, body.knowledge_base_ids))
        if kbs is None:
            return {"total": 0, "items": []}
        total, docs = await reader.list_documents(
            body.tenant_id, kbs, keyword=body.keyword, page=body.page, size=body.size,
            document_ids=body.document_ids,
        )  # fmt: skip
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
            report = await search.search(
                body.tenant_id, kbs, body.query, body.mode, body.limit,
                document_ids=body.document_ids, faq_tags=body.faq_tags,
                faq_score_boost=body.faq_score_boost,
            )  # fmt: skip
        except NoIndexInScope as exc:
            raise HTTPException(409, str(exc)) from None
        return {
            "results": [asdict(c) for c in report.results],
            "requested_mode": report.requested_mode.value,
            "mode_fallbacks": report.mode_fallbacks,
            "rerank_rejected": report.rerank_rejected,
        }

    @router.put("/internal/documents/{doc_id}/tags")
    async def put_tags(request: Request, doc_id: str, body: DocumentTags) -> dict[str, Any]:
        """Replace a document's tags (what an ``@tag`` mention selects)."""
        kbs = as_filter(scope_of(request, None))
        tags = sorted(set(body.tags))
        if kbs is None or not await store.set_document_tags(body.tenant_id, kbs, doc_id, tags):
            raise HTTPException(404, f"document {doc_id!r} not found")
        return {"id": doc_id, "tags": tags}

    @router.post("/internal/search-targets")
    async def search_targets(request: Request, body: SearchTargetsRequest) -> dict[str, Any]:
        """SPEC A-11: the documents a request's ``@doc`` and ``@tag`` mentions select
        among the KBs in scope, and the FAQ bases whose entries carry a mentioned tag; 404
        naming a mentioned document that is not in scope, 422 naming tags that no
        document or FAQ entry in scope carries."""
        kbs = as_filter(scope_of(request, body.knowledge_base_ids))
        found = [] if kbs is None else await store.search_targets(
            body.tenant_id, kbs, body.document_ids, body.tags
        )  # fmt: skip
        faqs = [] if kbs is None or faq is None else await faq.tagged(
            body.tenant_id, kbs, body.tags
        )  # fmt: skip
        docs = {doc for _, doc in found}
        missing = [d for d in body.document_ids if d not in docs]
        if missing:
            raise HTTPException(404, f"mentioned document(s) not found: {missing}")
        if body.tags and not found and not faqs:
            raise HTTPException(422, f"no document or FAQ entry in scope is tagged {body.tags}")
        return {
            "targets": [{"knowledge_base_id": kb, "document_id": d} for kb, d in found],
            "faq_targets": [{"knowledge_base_id": kb, "tag": tag} for kb, tag in faqs],
        }

    if faq is not None:
        router.include_router(
            faq_router(store, faq, embedder, limits or IngestionLimits(), require_kb)
        )

    @router.post("/internal/graph/query")
    async def graph_query(request: Request, body: GraphQuery) -> dict[str, Any]:
        """``query_knowledge_graph``: each named KB queried at once; a KB out of reach,
        without a graph or whose query failed answers with its ``error``."""
        reach = scope_of(request, None)
        named = list(dict.fromkeys(body.knowledge_base_ids))
        enabled = await graph.graph_enabled(body.tenant_id, named)
        answers = await asyncio.gather(
            *(_graph_answer(graph, store, body.tenant_id, kb, body.query,
                            reachable=(reach is None or kb in reach) and kb in enabled,
                            has_graph=enabled.get(kb, False)) for kb in named)
        )  # fmt: skip
        return {"results": answers}

    @router.get(TITLES_ROUTE)
    async def titles(
        tenant_id: str,
        kb_id: Annotated[list[str] | None, Query()] = None,
        limit: Annotated[int, Query(ge=1, le=50)] = 8,
    ) -> list[KnowledgeTitle]:
        """The newest ready documents of the named KBs (all the tenant's when none)."""
        return await directory.titles(tenant_id, kb_id or [], limit)

    return router


GRAPH_TEXT_HITS = 5
"""Keyword hits of the KB's chunks given after the graph's relations."""
GRAPH_QUERY_TIMEOUT_S = 10.0


async def _graph_answer(
    graph: GraphStore, store: KnowledgeStore, tenant_id: str, kb_id: str, query: str, *,
    reachable: bool, has_graph: bool,
) -> dict[str, Any]:  # fmt: skip
    """One KB's part of a graph query (an error never fails the others)."""
    if not reachable:
        return {"knowledge_base_id": kb_id, "error": "knowledge base not found"}
    if not has_graph:
        return {"knowledge_base_id": kb_id, "error": "this knowledge base has no knowledge graph"}
    try:
        async with asyncio.timeout(GRAPH_QUERY_TIMEOUT_S):
            hits = await graph.query(tenant_id, kb_id, query)
            text = await store.keyword_search(tenant_id, [kb_id], query, GRAPH_TEXT_HITS)
    except TimeoutError:
        return {"knowledge_base_id": kb_id, "error": "the graph query timed out"}
    except Exception:
        log.exception("graph_query_failed", knowledge_base_id=kb_id)
        return {"knowledge_base_id": kb_id, "error": "the graph query failed"}
    cited = {r.chunk_id for r in [*hits.relations, *hits.path]}
    return {
        "knowledge_base_id": kb_id,
        "entities": [asdict(e) for e in hits.entities],
        "relations": [asdict(r) for r in hits.relations],
        "path": [asdict(r) for r in hits.path],
        "text_hits": [asdict(h) for h in text if h.chunk_id not in cited],
    }


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
