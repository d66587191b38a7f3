"""Knowledge-base routes of the public API (``/api/v1``): every one requires an API key, is
scoped to its tenant, and is behind the knowledge scope guard (``knowledge_scope``): a
knowledge base or document outside a KB-restricted key's list is 404 (SPEC A-09)."""

import asyncio
import time
from dataclasses import asdict
from typing import Annotated, Any

from fastapi import APIRouter, Depends, File, Form, HTTPException, Query, Response, UploadFile
from pydantic import BaseModel, Field
from weft_storage.knowledge.documents import DocumentInfo, DocumentReader
from weft_storage.knowledge.ingest import IngestionQueue
from weft_storage.knowledge.store import KnowledgeStore

from weft_gateway.auth import ApiKeyAuth, Principal
from weft_gateway.files_api import invalid
from weft_gateway.knowledge_scope import (
    KnowledgeScope,
    document_not_found,
    refuse_restricted_create,
    seal,
    visible_to,
)

SUPPORTED_SUFFIXES = (".txt", ".md", ".csv", ".xlsx", ".pdf")
TEXT_SUFFIXES = (".txt", ".md")
DONE = ("ready", "failed")


class KnowledgeBaseCreate(BaseModel):
    """Body of ``POST /knowledge-bases``."""

    name: str = Field(min_length=1, max_length=200)
    description: str = Field(default="", max_length=2000)


class DocumentCreate(BaseModel):
    """Body of ``POST /knowledge-bases/{id}/documents`` (plain text or Markdown)."""

    title: str = Field(min_length=1, max_length=500)
    content: str = Field(min_length=1, max_length=5_000_000)
    file_name: str = Field(default="", max_length=500)


def knowledge_router(
    store: KnowledgeStore,
    auth: ApiKeyAuth,
    queue: IngestionQueue,
    catalog: DocumentReader,
    scope: KnowledgeScope,
    *,
    document_wait_s: float = 10.0,
) -> APIRouter:
    """Routes under ``/api/v1``. The scope guard has already checked every ``{kb_id}`` and
    ``{doc_id}`` of a path when a handler runs; handlers check what their body names."""
    guard = scope.guard(auth)
    router = APIRouter(prefix="/api/v1", tags=["knowledge"], dependencies=[Depends(guard)])
    Who = Annotated[Principal, Depends(auth)]

    @router.post("/knowledge-bases", status_code=201)
    async def create_kb(who: Who, body: KnowledgeBaseCreate) -> dict[str, str]:
        refuse_restricted_create(who)
        kb_id = await store.create_knowledge_base(who.tenant_id, body.name, body.description)
        return {"id": kb_id, "name": body.name}

    @router.get("/knowledge-bases")
    async def list_kbs(who: Who) -> list[dict[str, str]]:
        return visible_to(who, await store.list_knowledge_bases(who.tenant_id))

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
        name = body.file_name
        doc_id = await queue.enqueue_file(
            who.tenant_id, kb_id, title=body.title, file_name=name,
            content=body.content.encode(), content_type="text/markdown", user_id=who.user_id,
            parse_as=name if name.lower().endswith(TEXT_SUFFIXES) else "document.md",
        )  # fmt: skip
        wait = document_wait_s if wait_s is None else min(wait_s, document_wait_s)
        info = await _ingested(catalog, who.tenant_id, kb_id, doc_id, wait)
        if info is None:  # deleted while it waited
            raise document_not_found(doc_id)
        if info.status == "failed":
            raise invalid(["body", "content"], f"document {doc_id} was refused: {info.error}")
        if info.status != "ready":
            response.status_code = 202
        return {"id": doc_id, "knowledge_base_id": kb_id, "chunks": info.chunk_count,
                "status": info.status}  # fmt: skip

    @router.post("/knowledge-bases/{kb_id}/files", status_code=202)
    async def upload_file(
        who: Who,
        kb_id: str,
        file: UploadFile = File(description="txt, md, csv, xlsx or pdf"),
        title: str = Form(default="", max_length=500),
    ) -> dict[str, Any]:
        """Queue a file; tool-exec workers parse, chunk and embed it asynchronously."""
        name = file.filename or "upload"
        if not name.lower().endswith(SUPPORTED_SUFFIXES):
            raise HTTPException(415, f"unsupported file type {name!r}; use {SUPPORTED_SUFFIXES}")
        content = await file.read()
        if not content:
            raise HTTPException(422, "the file is empty")
        doc_id = await queue.enqueue_file(
            who.tenant_id, kb_id, title=title or name, file_name=name, content=content,
            content_type=file.content_type or "", user_id=who.user_id,
        )  # fmt: skip
        return {"id": doc_id, "knowledge_base_id": kb_id, "status": "pending"}

    @router.get("/knowledge-bases/{kb_id}/documents")
    async def list_documents(
        who: Who, kb_id: str, page: int = 1, page_size: int = 20
    ) -> dict[str, Any]:
        """Documents with their ingestion status and progress."""
        size = max(1, min(page_size, 100))
        total, docs = await catalog.list_documents(
            who.tenant_id, [kb_id], page=max(1, page), size=size
        )
        return {"total": total, "items": [asdict(d) for d in docs]}

    @router.get("/knowledge-bases/{kb_id}/documents/{doc_id}")
    async def get_document(who: Who, kb_id: str, doc_id: str) -> dict[str, Any]:
        """One document's status (pending, processing, ready, failed) and progress."""
        info = await catalog.document(who.tenant_id, [kb_id], doc_id)
        if info is None:
            raise document_not_found(doc_id)
        return asdict(info)

    return seal(router, guard)


async def _ingested(
    catalog: DocumentReader, tenant_id: str, kb_id: str, doc_id: str, wait_s: float
) -> DocumentInfo | None:
    """The document once ready or failed, or as it is when ``wait_s`` ran out."""
    deadline, pause = time.monotonic() + wait_s, 0.02
    while True:
        info = await catalog.document(tenant_id, [kb_id], doc_id)
        if info is None or info.status in DONE or time.monotonic() + pause > deadline:
            return info
        await asyncio.sleep(pause)
        pause = min(pause * 2, 0.25)
