"""Knowledge-base routes of the public API (``/api/v1/knowledge-bases``)."""

from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException
from pydantic import BaseModel, Field
from weft_storage.knowledge import KnowledgeStore

from weft_gateway.auth import ApiKeyAuth, Principal


class KnowledgeBaseCreate(BaseModel):
    """Body of ``POST /knowledge-bases``."""

    name: str = Field(min_length=1, max_length=200)
    description: str = Field(default="", max_length=2000)


class DocumentCreate(BaseModel):
    """Body of ``POST /knowledge-bases/{id}/documents`` (plain text or Markdown)."""

    title: str = Field(min_length=1, max_length=500)
    content: str = Field(min_length=1, max_length=5_000_000)
    file_name: str = Field(default="", max_length=500)


def knowledge_router(store: KnowledgeStore, auth: ApiKeyAuth) -> APIRouter:
    """Routes under ``/api/v1``; every one requires an API key and is scoped to its tenant."""
    router = APIRouter(prefix="/api/v1", tags=["knowledge"])
    Who = Annotated[Principal, Depends(auth)]

    @router.post("/knowledge-bases", status_code=201)
    async def create_kb(who: Who, body: KnowledgeBaseCreate) -> dict[str, str]:
        kb_id = await store.create_knowledge_base(who.tenant_id, body.name, body.description)
        return {"id": kb_id, "name": body.name}

    @router.get("/knowledge-bases")
    async def list_kbs(who: Who) -> list[dict[str, str]]:
        return await store.list_knowledge_bases(who.tenant_id)

    @router.post("/knowledge-bases/{kb_id}/documents", status_code=201)
    async def add_document(who: Who, kb_id: str, body: DocumentCreate) -> dict[str, Any]:
        if not await store.knowledge_base_exists(who.tenant_id, kb_id):
            raise HTTPException(404, f"knowledge base {kb_id!r} not found")
        doc_id, chunks = await store.add_document(
            who.tenant_id, kb_id, body.title, body.content, body.file_name
        )
        return {"id": doc_id, "knowledge_base_id": kb_id, "chunks": chunks, "status": "ready"}

    return router
