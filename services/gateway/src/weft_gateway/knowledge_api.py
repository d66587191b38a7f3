"""Knowledge-base routes of the public API (``/api/v1``): every one requires an API key, is
scoped to its tenant, and is behind the knowledge scope guard (``knowledge_scope``): a
knowledge base or document outside a KB-restricted key's list is 404 (SPEC A-09).

The knowledge service owns knowledge bases and documents: each route checks its input
here (sizes, types, the key's reach) and proxies to knowledge's internal routes with the
caller's credential, as agents are proxied to agent-config."""

from typing import Annotated, Any, Literal
from urllib.parse import quote

import httpx
from fastapi import APIRouter, Depends, File, Form, HTTPException, Query, Response, UploadFile
from pydantic import BaseModel, ConfigDict, Field, StrictBool

from weft_gateway.auth import ApiKeyAuth, Principal
from weft_gateway.files_api import invalid
from weft_gateway.knowledge_client import KnowledgeClient
from weft_gateway.knowledge_scope import (
    KnowledgeScope,
    document_not_found,
    refuse_restricted_create,
    seal,
    visible_to,
)
from weft_gateway.upload_origin import UploadOrigins

SUPPORTED_SUFFIXES = (".txt", ".md", ".csv", ".xlsx", ".pdf")
KNOWLEDGE_TIMEOUT_S = 10.0
"""A call's answer time besides the ingestion it waits for."""


class KnowledgeBaseCreate(BaseModel):
    """Body of ``POST /knowledge-bases``."""

    name: str = Field(min_length=1, max_length=200)
    description: str = Field(default="", max_length=2000)
    kind: Literal["documents", "faq"] = Field(
        default="documents",
        description="documents: files and texts cut into chunks; faq: question and answer "
        "entries (docs/knowledge.md).",
    )
    graph_enabled: bool = Field(
        default=False,
        description="Extract entities and relations of its documents at ingestion, for "
        "query_knowledge_graph (SPEC T-10).",
    )
    wiki_enabled: bool = Field(
        default=False, description="Generate wiki pages from its documents (SPEC T-18)."
    )


class KnowledgeBaseUpdate(BaseModel):
    """Body of ``PATCH /knowledge-bases/{id}``: the switches to change (absent: unchanged)."""

    model_config = ConfigDict(extra="forbid")

    wiki_enabled: StrictBool | None = Field(
        default=None,
        description="On: wiki pages are generated from the documents it already holds "
        "(a backfill) and from every new one; off: generation stops, pages stay readable.",
    )
    graph_enabled: StrictBool | None = Field(
        default=None,
        description="On: its documents' entities and relations are extracted (a backfill "
        "of those it holds); off: extraction stops, the graph stays readable.",
    )


Tag = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[\w.:-]+$")]
"""A document tag (what an ``@tag:`` mention selects)."""

SESSION_ID_PATTERN = r"^[A-Za-z0-9_.:-]{1,128}$"
SESSION_DESCRIPTION = (
    "One of the caller's sessions: the document's wiki and graph progress is announced "
    "in its stream (knowledge_progress notices, docs/knowledge.md)."
)


class DocumentCreate(BaseModel):
    """Body of ``POST /knowledge-bases/{id}/documents`` (plain text or Markdown)."""

    title: str = Field(min_length=1, max_length=500)
    content: str = Field(min_length=1, max_length=5_000_000)
    file_name: str = Field(default="", max_length=500)
    tags: list[Tag] = Field(default_factory=list, max_length=32)
    session_id: str | None = Field(
        default=None, pattern=SESSION_ID_PATTERN, description=SESSION_DESCRIPTION
    )


class DocumentTags(BaseModel):
    """Body of ``PUT /knowledge-bases/{id}/documents/{doc_id}/tags``."""

    tags: list[Tag] = Field(max_length=32)


class FaqEntry(BaseModel):
    """Body of the FAQ entry routes (SPEC C-04)."""

    question: str = Field(min_length=1, max_length=1_000)
    answer: str = Field(min_length=1, max_length=20_000)
    similar_questions: list[Annotated[str, Field(min_length=1, max_length=1_000)]] = Field(
        default_factory=list, max_length=20, description="Other phrasings of the question."
    )
    tag: str = Field(default="", max_length=64)


FAQ_IMPORT_MAX_BYTES = 10 * 1024 * 1024
FAQ_SUFFIXES = (".csv", ".xlsx")


def knowledge_router(
    knowledge: KnowledgeClient,
    auth: ApiKeyAuth,
    scope: KnowledgeScope,
    *,
    document_wait_s: float = 10.0,
    origins: UploadOrigins | None = None,
) -> APIRouter:
    """Routes under ``/api/v1``. The scope guard has already checked every ``{kb_id}`` and
    ``{doc_id}`` of a path when a handler runs; handlers check what their body names."""
    guard = scope.guard(auth)
    router = APIRouter(prefix="/api/v1", tags=["knowledge"], dependencies=[Depends(guard)])
    Who = Annotated[Principal, Depends(auth)]

    async def origin(who: Principal, session_id: str | None) -> dict[str, Any]:
        if origins is None:
            if session_id is not None:
                raise HTTPException(422, "uploads cannot name a session on this gateway")
            return {}
        return await origins.fields(who, session_id)

    @router.post("/knowledge-bases", status_code=201)
    async def create_kb(who: Who, body: KnowledgeBaseCreate) -> dict[str, Any]:
        refuse_restricted_create(who)
        body_out = {"tenant_id": who.tenant_id, **body.model_dump()}
        created: dict[str, Any] = await knowledge.call(
            "POST", "/internal/knowledge-bases", json=body_out
        )
        return created

    @router.get("/knowledge-bases")
    async def list_kbs(who: Who) -> list[dict[str, Any]]:
        """The KBs the key reaches, with their switches and capabilities (SPEC A-07)."""
        found = await knowledge.call(
            "GET", "/internal/knowledge-bases", params={"tenant_id": who.tenant_id}
        )
        return visible_to(who, found)

    @router.patch("/knowledge-bases/{kb_id}")
    async def change_kb(who: Who, kb_id: str, body: KnowledgeBaseUpdate) -> dict[str, Any]:
        """Switch a KB's wiki or graph on or off after its creation; switched on, the
        documents it holds are queued for the work (``backfilled`` counts them). Not
        with a KB-restricted key: the work spends the whole tenant's model budget."""
        if who.knowledge_base_ids is not None:
            raise HTTPException(
                403, "this API key is limited to some knowledge bases and cannot change "
                "their switches; use an unrestricted key",
            )  # fmt: skip
        if body.wiki_enabled is None and body.graph_enabled is None:
            raise invalid(["body"], "name wiki_enabled or graph_enabled")
        sent = {"tenant_id": who.tenant_id, **body.model_dump(exclude_none=True),
                **await origin(who, None)}  # fmt: skip
        changed: dict[str, Any] = await knowledge.call(
            "PATCH", f"/internal/knowledge-bases/{quote(kb_id, safe='')}", json=sent
        )
        return changed

    @router.get("/knowledge-bases/{kb_id}")
    async def get_kb(who: Who, kb_id: str) -> dict[str, Any]:
        """One KB: switches, capabilities and, with a graph, its extraction progress."""
        found: dict[str, Any] = await knowledge.call(
            "GET", f"/internal/knowledge-bases/{quote(kb_id, safe='')}",
            params={"tenant_id": who.tenant_id},
        )  # fmt: skip
        return found

    @router.post(
        "/knowledge-bases/{kb_id}/documents",
        status_code=201,
        responses={202: {"description": "Queued; not ingested within the wait (poll it)"}},
    )
    async def add_document(
        who: Who,
        kb_id: str,
        body: DocumentCreate,
        response: Response,
        wait_s: Annotated[
            float | None,
            Query(ge=0, description="Seconds to wait for ingestion (at most the server's)."),
        ] = None,
    ) -> dict[str, Any]:
        """Ingest a text through the same fair queue as uploaded files (its tenant's share
        and bounds), waiting for it up to ``wait_s`` (the server's ``document_wait_s`` by
        default and at most): 201 ``ready``, or 202 with the document still ``pending`` or
        ``processing`` (poll it); a text its bounds refuse is 422."""
        wait = document_wait_s if wait_s is None else min(wait_s, document_wait_s)
        sent = {"tenant_id": who.tenant_id, "user_id": who.user_id,
                **body.model_dump(exclude={"session_id"}),
                **await origin(who, body.session_id)}  # fmt: skip
        info = await knowledge.call(
            "POST", f"/internal/knowledge-bases/{kb_id}/documents", json=sent,
            params={"wait_s": wait}, timeout=knowledge_timeout(wait),
        )  # fmt: skip
        doc_id = info["id"]
        if info["status"] == "failed":
            raise invalid(["body", "content"], f"document {doc_id} was refused: {info['error']}")
        if info["status"] != "ready":
            response.status_code = 202
        return {"id": doc_id, "knowledge_base_id": kb_id, "chunks": info["chunk_count"],
                "status": info["status"]}  # fmt: skip

    @router.post("/knowledge-bases/{kb_id}/files", status_code=202)
    async def upload_file(
        who: Who,
        kb_id: str,
        file: UploadFile = File(description="txt, md, csv, xlsx or pdf"),
        title: str = Form(default="", max_length=500),
        tags: str = Form(default="", max_length=2_000, description="Comma-separated tags."),
        session_id: str | None = Form(
            default=None, pattern=SESSION_ID_PATTERN, description=SESSION_DESCRIPTION
        ),
    ) -> dict[str, Any]:
        """Queue a file; knowledge's ingestion workers parse, chunk and embed it
        asynchronously."""
        name = file.filename or "upload"
        if not name.lower().endswith(SUPPORTED_SUFFIXES):
            raise HTTPException(415, f"unsupported file type {name!r}; use {SUPPORTED_SUFFIXES}")
        content = await file.read()
        if not content:
            raise HTTPException(422, "the file is empty")
        params = {"tenant_id": who.tenant_id, "user_id": who.user_id, "file_name": name,
                  "title": title, "content_type": file.content_type or "",
                  "tag": [t.strip() for t in tags.split(",") if t.strip()],
                  **await origin(who, session_id)}  # fmt: skip
        queued: dict[str, Any] = await knowledge.call(
            "POST", f"/internal/knowledge-bases/{kb_id}/files", params=params, content=content,
            headers={"Content-Type": "application/octet-stream"},
        )  # fmt: skip
        return queued

    @router.get("/knowledge-bases/{kb_id}/documents")
    async def list_documents(
        who: Who, kb_id: str, page: int = 1, page_size: int = 20
    ) -> dict[str, Any]:
        """Documents with their ingestion status and progress."""
        size = max(1, min(page_size, 100))
        params = {"tenant_id": who.tenant_id, "kb_id": kb_id, "page": max(1, page), "size": size}
        listed: dict[str, Any] = await knowledge.call("GET", "/internal/documents", params=params)
        return listed

    @router.put("/knowledge-bases/{kb_id}/documents/{doc_id}/tags")
    async def put_tags(who: Who, kb_id: str, doc_id: str, body: DocumentTags) -> dict[str, Any]:
        """Replace a document's tags (an ``@tag:`` mention searches the documents that
        carry it)."""
        sent = {"tenant_id": who.tenant_id, **body.model_dump()}
        tagged: dict[str, Any] = await knowledge.call(
            "PUT", f"/internal/documents/{_q(doc_id)}/tags", json=sent
        )
        return tagged

    faq = "/knowledge-bases/{kb_id}/faq"

    def faq_path(kb_id: str, entry_id: str | None = None) -> str:
        path = f"/internal/knowledge-bases/{_q(kb_id)}/faq/entries"
        return path if entry_id is None else f"{path}/{_q(entry_id)}"

    @router.post(f"{faq}/entries", status_code=201)
    async def create_faq_entry(who: Who, kb_id: str, body: FaqEntry) -> dict[str, Any]:
        """Add one question and its answer to an FAQ base (409 for a document base)."""
        sent = {"tenant_id": who.tenant_id, "user_id": who.user_id, **body.model_dump()}
        created: dict[str, Any] = await knowledge.call("POST", faq_path(kb_id), json=sent)
        return created

    @router.get(f"{faq}/entries")
    async def list_faq_entries(
        who: Who,
        kb_id: str,
        page: Annotated[int, Query(ge=1, le=1_000_000)] = 1,
        page_size: Annotated[int, Query(ge=1, le=100)] = 20,
    ) -> dict[str, Any]:
        """The base's entries, oldest first: ``{"total", "items"}``."""
        params = {"tenant_id": who.tenant_id, "page": page, "size": page_size}
        listed: dict[str, Any] = await knowledge.call("GET", faq_path(kb_id), params=params)
        return listed

    @router.get(f"{faq}/entries/{{entry_id}}")
    async def get_faq_entry(who: Who, kb_id: str, entry_id: str) -> dict[str, Any]:
        params = {"tenant_id": who.tenant_id}
        found: dict[str, Any] = await knowledge.call(
            "GET", faq_path(kb_id, entry_id), params=params
        )
        return found

    @router.put(f"{faq}/entries/{{entry_id}}")
    async def replace_faq_entry(
        who: Who, kb_id: str, entry_id: str, body: FaqEntry
    ) -> dict[str, Any]:
        sent = {"tenant_id": who.tenant_id, "user_id": who.user_id, **body.model_dump()}
        replaced: dict[str, Any] = await knowledge.call("PUT", faq_path(kb_id, entry_id), json=sent)
        return replaced

    @router.delete(f"{faq}/entries/{{entry_id}}", status_code=204)
    async def delete_faq_entry(who: Who, kb_id: str, entry_id: str) -> Response:
        params = {"tenant_id": who.tenant_id}
        await knowledge.call("DELETE", faq_path(kb_id, entry_id), params=params)
        return Response(status_code=204)

    @router.post(f"{faq}/import", status_code=201)
    async def import_faq(
        who: Who, kb_id: str, file: UploadFile = File(description="csv or xlsx")
    ) -> dict[str, Any]:
        """Every row of a CSV or XLSX file (columns ``question``, ``answer``, optional
        ``similar_questions`` and ``tag``) as an entry, or none: 413 past a size, row or
        decompression bound, 422 naming the column or row at fault. The entries are
        searchable by keyword at once; their embeddings are queued (``embedding_job``,
        progress under ``faq`` of ``GET /knowledge-bases/{kb_id}``)."""
        name = file.filename or "upload"
        if not name.lower().endswith(FAQ_SUFFIXES):
            raise HTTPException(415, f"unsupported file type {name!r}; use {FAQ_SUFFIXES}")
        content = await file.read(FAQ_IMPORT_MAX_BYTES + 1)
        if len(content) > FAQ_IMPORT_MAX_BYTES:
            raise HTTPException(413, f"the file is over {FAQ_IMPORT_MAX_BYTES // 2**20} MB")
        if not content:
            raise HTTPException(422, "the file is empty")
        imported: dict[str, Any] = await knowledge.call(
            "POST", f"/internal/knowledge-bases/{_q(kb_id)}/faq/import",
            params={"tenant_id": who.tenant_id, "user_id": who.user_id, "file_name": name},
            content=content,
            headers={"Content-Type": "application/octet-stream"}, timeout=FAQ_IMPORT_TIMEOUT,
        )  # fmt: skip
        return imported

    @router.get("/knowledge-bases/{kb_id}/documents/{doc_id}")
    async def get_document(who: Who, kb_id: str, doc_id: str) -> dict[str, Any]:
        """One document's status (pending, processing, ready, failed) and progress."""
        info = await knowledge.document(who.tenant_id, doc_id, kb_id)
        if info is None:
            raise document_not_found(doc_id)
        return info

    @router.delete("/knowledge-bases/{kb_id}/documents/{doc_id}")
    async def delete_document(who: Who, kb_id: str, doc_id: str) -> dict[str, Any]:
        """Delete a document; wiki pages citing it are flagged ``out_of_date``."""
        path = f"/internal/knowledge-bases/{kb_id}/documents/{doc_id}"
        deleted: dict[str, Any] = await knowledge.call(
            "DELETE", path, params={"tenant_id": who.tenant_id}
        )
        return deleted

    return seal(router, guard)


FAQ_IMPORT_TIMEOUT = httpx.Timeout(120.0)
"""An import embeds its questions before it answers."""


def _q(value: str) -> str:
    return quote(value, safe="")


def knowledge_timeout(wait_s: float) -> httpx.Timeout:
    """A call that waits ``wait_s`` for ingestion gets that much longer to answer."""
    return httpx.Timeout(KNOWLEDGE_TIMEOUT_S + wait_s)
