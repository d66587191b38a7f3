"""Internal HTTP API of memory (called by the gateway and the engine, never by browsers)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from fastapi import APIRouter, HTTPException, Query
from pydantic import BaseModel, Field
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from ulid import ULID
from weft_storage.models import ChatSession, Message

from weft_memory.history import HistoryLoader


class SessionCreate(BaseModel):
    """A new session."""

    tenant_id: str = Field(min_length=1)
    user_id: str = Field(min_length=1)
    title: str = Field(default="", max_length=500)
    agent_id: str | None = None


class SessionOut(BaseModel):
    """A session as the API shows it."""

    id: str
    tenant_id: str
    user_id: str
    title: str
    agent_id: str | None
    created_at: datetime


class MessageOut(BaseModel):
    """A stored message."""

    id: str
    session_id: str
    request_id: str
    role: str
    content: str
    status: str
    is_completed: bool
    is_fallback: bool
    duration_ms: int
    agent_steps: list[dict[str, Any]]
    references: list[dict[str, Any]]
    created_at: datetime


class HistoryOut(BaseModel):
    """LLM-ready history."""

    messages: list[dict[str, Any]]


def memory_router(sessions: async_sessionmaker[AsyncSession]) -> APIRouter:
    """Routes under ``/internal``."""
    router = APIRouter(prefix="/internal", tags=["internal"])
    history = HistoryLoader(sessions)

    async def get_owned(s: AsyncSession, tenant_id: str, session_id: str) -> ChatSession:
        row = await s.scalar(
            select(ChatSession).where(
                ChatSession.id == session_id,
                ChatSession.tenant_id == tenant_id,
                ChatSession.deleted_at.is_(None),
            )
        )
        if row is None:
            raise HTTPException(404, f"session {session_id!r} not found")
        return row

    @router.post("/sessions", status_code=201, response_model=SessionOut)
    async def create_session(body: SessionCreate) -> ChatSession:
        row = ChatSession(id=f"ses_{ULID()}", **body.model_dump())
        async with sessions.begin() as s:
            s.add(row)
        async with sessions() as s:
            return await get_owned(s, body.tenant_id, row.id)

    @router.get("/sessions/{session_id}", response_model=SessionOut)
    async def get_session(session_id: str, tenant_id: str = Query(min_length=1)) -> ChatSession:
        async with sessions() as s:
            return await get_owned(s, tenant_id, session_id)

    @router.get("/sessions/{session_id}/messages", response_model=list[MessageOut])
    async def list_messages(
        session_id: str,
        tenant_id: str = Query(min_length=1),
        limit: int = Query(default=50, ge=1, le=200),
    ) -> list[Message]:
        async with sessions() as s:
            await get_owned(s, tenant_id, session_id)
            stmt = (
                select(Message)
                .where(Message.session_id == session_id, Message.tenant_id == tenant_id)
                .order_by(Message.created_at.desc(), Message.id.desc())
                .limit(limit)
            )
            rows = list((await s.scalars(stmt)).all())
        return list(reversed(rows))

    @router.get("/sessions/{session_id}/history", response_model=HistoryOut)
    async def get_history(
        session_id: str,
        tenant_id: str = Query(min_length=1),
        max_turns: int = Query(default=5, ge=0, le=100),
    ) -> HistoryOut:
        async with sessions() as s:
            await get_owned(s, tenant_id, session_id)
        return HistoryOut(messages=await history.load(tenant_id, session_id, max_turns))

    return router
