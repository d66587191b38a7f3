"""Knowledge-base routes of the public API (``/api/v1``): every one requires an API key, is
scoped to its tenant, and is behind the knowledge scope guard (``knowledge_scope``): a
knowledge base or document outside a KB-restricted key's list is 404 (SPEC A-09).

The knowledge service owns knowledge bases and documents: each route checks its input
here (sizes, types, the key's reach) and proxies to knowledge's internal routes with the
caller's credential, as agents are proxied to agent-config."""

from typing import Annotated, Any

import httpx
from fastapi import APIRouter, Depends, File, Form, HTTPException, Query, Response, UploadFile
from pydantic import BaseModel, Field

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

SUPPORTED_SUFFIXES = (".txt", ".md", ".csv", ".xlsx", ".pdf")
KNOWLEDGE_TIMEOUT_S = 10.0
"""A call's answer time besides the ingestion it waits for."""


class KnowledgeBaseCreate(BaseModel):
    """Body of ``POST /knowledge-bases``."""

    name: str = Field(min_length=1, max_length=200)
    description: str = Field(default="", max_length=2000)
    wiki_enabled: bool = Field(
        default=False, description="Generate wiki pages from its documents (SPEC T-18)."
    )


class DocumentCreate(BaseModel):
    """Body of ``POST /knowledge-bases/{id}/documents`` (plain text or Markdown)."""

    title: str = Field(min_length=1, max_length=500)
    content: str = Field(min_length=1, max_length=5_000_000)
    file_name: str = Field(default="", max_length=500)


def knowledge_router(
    knowledge: KnowledgeClient,
    auth: ApiKeyAuth,
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
    async def create_kb(who: Who, body: KnowledgeBaseCreate) -> dict[str, Any]:
        refuse_restricted_create(who)
        body_out = {"tenant_id": who.tenant_id, **body.model_dump()}
        created: dict[str, Any] = await knowledge.call(
            "POST", "/internal/knowledge-bases", json=body_out
        )
        return created

    @router.get("/knowledge-bases")
    async def list_kbs(who: Who) -> list[dict[str, str]]:
        found = await knowledge.call(
            "GET", "/internal/knowledge-bases", params={"tenant_id": who.tenant_id}
        )
        return visible_to(who, found)

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
        sent = {"tenant_id": who.tenant_id, "user_id": who.user_id, **body.model_dump()}
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
                  "title": title, "content_type": file.content_type or ""}  # fmt: skip
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


def knowledge_timeout(wait_s: float) -> httpx.Timeout:
    """A call that waits ``wait_s`` for ingestion gets that much longer to answer."""
    return httpx.Timeout(KNOWLEDGE_TIMEOUT_S + wait_s)
