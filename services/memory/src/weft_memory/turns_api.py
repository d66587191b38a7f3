"""Internal route the engine's ``TurnAuditor`` reads: turns that started and have not ended.

An assistant row stays ``running`` from its turn's ``turn_started`` until its ``complete``
is stored (``MessageRecorder``), so these rows are the durable side's list of turns in
flight (ARCHITECTURE invariant 2). The route spans tenants: it is meant for the engine
alone, like every ``/internal`` route (services do not authenticate each other yet).
"""

from __future__ import annotations

from datetime import datetime

from fastapi import APIRouter, Query
from pydantic import AwareDatetime, BaseModel
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from weft_storage.memory.models import Message

MAX_LIMIT = 1000


class UnfinishedTurn(BaseModel):
    """A turn whose assistant row is still ``running``."""

    tenant_id: str
    session_id: str
    request_id: str
    started_at: datetime
    """When its ``turn_started`` was emitted (the assistant row's time)."""


class UnfinishedTurns(BaseModel):
    """Oldest first; ``more``: the limit cut the list."""

    turns: list[UnfinishedTurn]
    more: bool


def turns_router(sessions: async_sessionmaker[AsyncSession]) -> APIRouter:
    """``GET /internal/turns/unfinished`` (partial index ``ix_messages_unfinished``)."""
    router = APIRouter(prefix="/internal", tags=["internal"])

    @router.get("/turns/unfinished", response_model=UnfinishedTurns)
    async def unfinished_turns(
        started_after: AwareDatetime = Query(description="Only turns started after this."),
        limit: int = Query(default=200, ge=1, le=MAX_LIMIT),
    ) -> UnfinishedTurns:
        """Turns started after ``started_after`` whose ``complete`` is not stored."""
        query = (
            select(Message.tenant_id, Message.session_id, Message.request_id, Message.created_at)
            .where(
                Message.role == "assistant",
                Message.status == "running",
                Message.created_at > started_after,
            )
            .order_by(Message.created_at)
            .limit(limit + 1)
        )
        async with sessions() as s:
            rows = (await s.execute(query)).all()
        turns = [
            UnfinishedTurn(tenant_id=t, session_id=sid, request_id=rid, started_at=at)
            for t, sid, rid, at in rows[:limit]
        ]
        return UnfinishedTurns(turns=turns, more=len(rows) > limit)

    return router
