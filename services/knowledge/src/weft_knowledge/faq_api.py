"""knowledge's internal routes of FAQ entries (SPEC C-04): create, list, read, replace,
delete, and bulk import from CSV/XLSX. No route embeds: a write stores its entries
(keyword-searchable at once) and queues their embeddings for the ingestion workers
(``faq_embedding``), which meter them.

Tenant routes like the others (``api.py``): the credential's tenant, narrowed to a
KB-restricted key's bases (a base outside them is the 404 of a missing one); an entry is
addressed through its base, so an entry of another base or tenant is 404 too. A base
that is not an FAQ base answers 409 naming its kind.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query, Request, Response
from pydantic import BaseModel, Field
from weft_storage.knowledge.faq import FAQ_KIND, FaqDraft, FaqStore
from weft_storage.knowledge.store import KnowledgeStore
from weft_tools.embeddings import Embedder
from weft_tools.ingestion_limits import IngestionLimits

from weft_knowledge.faq_import import (
    ANSWER_MAX_CHARS,
    QUESTION_MAX_CHARS,
    SIMILAR_MAX,
    TAG_MAX_CHARS,
    FaqImportRefused,
    FaqImportTooLarge,
    draft_problem,
    parse_faq_file,
)

KB_MAX_ENTRIES = 50_000
"""Entries of one FAQ base (its semantic search ranks them in the worker)."""
FAQ_PATH = "/internal/knowledge-bases/{kb_id}/faq"


class FaqEntryBody(BaseModel):
    """Body of ``POST .../faq/entries`` and ``PUT .../faq/entries/{entry_id}``."""

    tenant_id: str = Field(min_length=1, max_length=128)
    question: str = Field(min_length=1, max_length=QUESTION_MAX_CHARS)
    answer: str = Field(min_length=1, max_length=ANSWER_MAX_CHARS)
    similar_questions: list[Annotated[str, Field(min_length=1, max_length=QUESTION_MAX_CHARS)]] = (
        Field(default_factory=list, max_length=SIMILAR_MAX)
    )
    tag: str = Field(default="", max_length=TAG_MAX_CHARS)
    user_id: str = Field(default="", max_length=128)
    """Whose write: the embedding's usage is metered to this user."""

    def draft(self) -> FaqDraft:
        """The entry to store (stripped; a blank question or answer is a 422)."""
        draft = FaqDraft(
            question=self.question.strip(),
            answer=self.answer.strip(),
            similar_questions=tuple(q.strip() for q in self.similar_questions if q.strip()),
            tag=self.tag.strip(),
        )
        problem = draft_problem(draft)
        if problem:
            raise HTTPException(422, problem)
        return draft


def faq_router(
    store: KnowledgeStore,
    faq: FaqStore,
    embedder: Embedder | None,
    limits: IngestionLimits,
    require_kb: Any,
) -> APIRouter:
    """The FAQ routes; ``require_kb(request, tenant_id, kb_id)`` is api.py's scope check."""
    router = APIRouter(tags=["faq"])

    async def require_faq(request: Request, tenant_id: str, kb_id: str) -> None:
        await require_kb(request, tenant_id, kb_id)
        kind = await store.knowledge_base_kind(tenant_id, kb_id)
        if kind != FAQ_KIND:
            raise HTTPException(
                409, f"knowledge base {kb_id!r} is a {kind!r} base, not an FAQ base"
            )

    async def write(
        tenant_id: str, kb_id: str, drafts: list[FaqDraft], user_id: str
    ) -> tuple[list[str], str | None]:
        """Store the entries (keyword-searchable at once); with an embedder, queue the
        job that embeds them in the ingestion workers, off this request (the job)."""
        if embedder is None:
            return await faq.add(tenant_id, kb_id, drafts), None
        return await faq.add_queued(tenant_id, kb_id, drafts, user_id=user_id)

    async def room_for(tenant_id: str, kb_id: str, adding: int) -> None:
        held = await faq.count(tenant_id, kb_id)
        if held + adding > KB_MAX_ENTRIES:
            raise HTTPException(
                413,
                f"knowledge base {kb_id!r} holds {held:,} entries; {adding:,} more would pass "
                f"the limit of {KB_MAX_ENTRIES:,}",
            )

    @router.post(f"{FAQ_PATH}/entries", status_code=201)
    async def create_entry(request: Request, kb_id: str, body: FaqEntryBody) -> dict[str, Any]:
        await require_faq(request, body.tenant_id, kb_id)
        draft = body.draft()
        await room_for(body.tenant_id, kb_id, 1)
        [entry_id], _ = await write(body.tenant_id, kb_id, [draft], body.user_id)
        found = await faq.get(body.tenant_id, kb_id, entry_id)
        assert found is not None
        return asdict(found)

    @router.get(f"{FAQ_PATH}/entries")
    async def list_entries(
        request: Request,
        kb_id: str,
        tenant_id: str,
        page: Annotated[int, Query(ge=1, le=1_000_000)] = 1,
        size: Annotated[int, Query(ge=1, le=100)] = 20,
    ) -> dict[str, Any]:
        await require_faq(request, tenant_id, kb_id)
        total, rows = await faq.page(tenant_id, kb_id, page=page, size=size)
        return {"total": total, "items": [asdict(r) for r in rows]}

    @router.get(f"{FAQ_PATH}/entries/{{entry_id}}")
    async def get_entry(
        request: Request, kb_id: str, entry_id: str, tenant_id: str
    ) -> dict[str, Any]:
        await require_faq(request, tenant_id, kb_id)
        found = await faq.get(tenant_id, kb_id, entry_id)
        if found is None:
            raise HTTPException(404, f"FAQ entry {entry_id!r} not found")
        return asdict(found)

    @router.put(f"{FAQ_PATH}/entries/{{entry_id}}")
    async def replace_entry(
        request: Request, kb_id: str, entry_id: str, body: FaqEntryBody
    ) -> dict[str, Any]:
        await require_faq(request, body.tenant_id, kb_id)
        draft = body.draft()
        if await faq.get(body.tenant_id, kb_id, entry_id) is None:
            raise HTTPException(404, f"FAQ entry {entry_id!r} not found")
        await faq.replace(
            body.tenant_id, kb_id, entry_id, draft, queue_embedding=embedder is not None,
            user_id=body.user_id,
        )  # fmt: skip
        found = await faq.get(body.tenant_id, kb_id, entry_id)
        if found is None:  # deleted meanwhile
            raise HTTPException(404, f"FAQ entry {entry_id!r} not found")
        return asdict(found)

    @router.delete(f"{FAQ_PATH}/entries/{{entry_id}}", status_code=204)
    async def delete_entry(request: Request, kb_id: str, entry_id: str, tenant_id: str) -> Response:
        await require_faq(request, tenant_id, kb_id)
        if not await faq.delete(tenant_id, kb_id, entry_id):
            raise HTTPException(404, f"FAQ entry {entry_id!r} not found")
        return Response(status_code=204)

    @router.post(f"{FAQ_PATH}/import", status_code=201)
    async def import_entries(
        request: Request,
        kb_id: str,
        tenant_id: str,
        file_name: Annotated[str, Query(min_length=1, max_length=500)],
        user_id: Annotated[str, Query(max_length=128)] = "",
    ) -> dict[str, Any]:
        """Every row of the file as a new entry, or none of them (a 413 or 422 naming
        the bound, the row or the column). The entries are keyword-searchable at once;
        their embeddings are queued for the ingestion workers (``embedding_job``; the
        progress is on ``GET`` of the KB), never computed in this request."""
        await require_faq(request, tenant_id, kb_id)
        content = await request.body()
        if not content:
            raise HTTPException(422, "the file is empty")
        try:
            drafts = parse_faq_file(file_name, content, limits)
        except FaqImportTooLarge as exc:
            raise HTTPException(413, str(exc)) from None
        except FaqImportRefused as exc:
            raise HTTPException(422, str(exc)) from None
        await room_for(tenant_id, kb_id, len(drafts))
        ids, job = await write(tenant_id, kb_id, drafts, user_id)
        return {"imported": len(ids), "embedding_job": job}

    return router
