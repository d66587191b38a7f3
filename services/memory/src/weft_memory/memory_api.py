"""Internal routes of long-term memory (SPEC M-10, T-17): extraction of a turn (run
automatically after each completed turn of an agent with memory on; the route re-runs it by
hand), its status, recall / search_memory, search_conversations. Everything is scoped to
(tenant, user); the engine recalls only for agents with memory enabled (an agent with
memory off neither reads nor writes)."""

from __future__ import annotations

from datetime import datetime

from fastapi import APIRouter, HTTPException, Query, Request, Response
from pydantic import BaseModel, Field
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from weft_platform.internal_auth import caller_user

from weft_memory.api import get_owned
from weft_memory.extraction import ExtractionFailed, MemoryExtractor
from weft_memory.extraction_queue import ExtractionQueue
from weft_memory.longterm import LongTermMemory


class ExtractIn(BaseModel):
    """Which completed turn to learn from."""

    tenant_id: str = Field(min_length=1)
    user_id: str = Field(min_length=1)
    session_id: str = Field(min_length=1)
    request_id: str = Field(min_length=1)


class ExtractOut(BaseModel):
    """Facts stored (already known facts are not duplicated)."""

    memory_ids: list[str]
    facts: list[str]


class ExtractionOut(BaseModel):
    """Where the automatic extraction of one turn stands (SPEC M-10)."""

    request_id: str
    session_id: str
    user_id: str
    status: str = Field(description="waiting, pending, running, done, failed or skipped")
    attempts: int
    facts: int
    error: str | None
    updated_at: datetime


class MemoryOut(BaseModel):
    """A recalled fact; ``id``/``content``/``score`` match ``RecalledMemory``."""

    id: str
    content: str
    score: float
    created_at: datetime


class MemoriesOut(BaseModel):
    """Recalled facts, best first."""

    memories: list[MemoryOut]


class ConversationOut(BaseModel):
    """A matching message of a past conversation."""

    session_id: str
    session_title: str
    message_id: str
    role: str
    snippet: str
    created_at: datetime
    score: float


class ConversationsOut(BaseModel):
    """Matching messages, best first."""

    results: list[ConversationOut]


def memory_router(
    sessions: async_sessionmaker[AsyncSession],
    memory: LongTermMemory,
    extractor: MemoryExtractor | None,
    queue: ExtractionQueue | None = None,
) -> APIRouter:
    """Routes under ``/internal/memories`` and ``/internal/conversations``."""
    router = APIRouter(prefix="/internal", tags=["internal"])

    @router.post("/memories/extract", response_model=ExtractOut)
    async def extract(body: ExtractIn) -> ExtractOut:
        if extractor is None:
            raise HTTPException(503, "memory extraction has no model configured")
        async with sessions() as s:
            await get_owned(s, body.tenant_id, body.session_id, user_id=body.user_id)
        try:
            result = await extractor.extract_turn(
                body.tenant_id, body.user_id, body.session_id, body.request_id
            )
        except ExtractionFailed as exc:
            raise HTTPException(502, str(exc)) from None
        if result is None:
            raise HTTPException(404, f"no completed turn {body.request_id!r} in this session")
        return ExtractOut(memory_ids=result.memory_ids, facts=result.facts)

    @router.get("/memories/extractions/{request_id}", response_model=ExtractionOut)
    async def extraction_status(
        request: Request, request_id: str, tenant_id: str = Query(min_length=1)
    ) -> ExtractionOut:
        """The automatic extraction of turn ``request_id``; 404 when the turn has none (its
        agent had memory off, or the turn is unknown) or is another user's."""
        row = await queue.get(tenant_id, request_id) if queue is not None else None
        caller = caller_user(request)
        if row is None or (caller is not None and row.user_id != caller):
            raise HTTPException(404, f"no memory extraction for turn {request_id!r}")
        return ExtractionOut.model_validate(row, from_attributes=True)

    @router.get("/memories/search", response_model=MemoriesOut)
    async def search_memories(
        tenant_id: str = Query(min_length=1),
        user_id: str = Query(min_length=1),
        query: str = "",
        limit: int = Query(default=10, ge=1, le=20),
    ) -> MemoriesOut:
        hits = await memory.search(tenant_id, user_id, query, limit)
        return MemoriesOut(memories=[MemoryOut(**h.__dict__) for h in hits])

    @router.delete("/memories/{memory_id}", status_code=204)
    async def forget(
        memory_id: str, tenant_id: str = Query(min_length=1), user_id: str = Query(min_length=1)
    ) -> Response:
        if not await memory.forget(tenant_id, user_id, memory_id):
            raise HTTPException(404, f"memory {memory_id!r} not found")
        return Response(status_code=204)

    @router.get("/conversations/search", response_model=ConversationsOut)
    async def search_conversations(
        tenant_id: str = Query(min_length=1),
        user_id: str = Query(min_length=1),
        query: str = Query(min_length=1),
        limit: int = Query(default=5, ge=1, le=8),
    ) -> ConversationsOut:
        hits = await memory.search_conversations(tenant_id, user_id, query, limit)
        return ConversationsOut(results=[ConversationOut(**h.__dict__) for h in hits])

    return router
