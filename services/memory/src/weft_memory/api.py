"""Internal HTTP API of memory (called by the gateway and the engine, never by browsers).

Every route is scoped by ``tenant_id``: another tenant's session answers 404 (invariant 5).
The routes a user's request reaches (get, change, delete, messages) are scoped by
``user_id`` too, a required parameter: another user's session of the same tenant answers
the same 404, exactly as lists hide it. The session list's ``user_id`` is optional, and
without it the list is the caller's (the user of the request credential), never the
tenant's.
"""

from __future__ import annotations

from collections.abc import Awaitable
from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter, HTTPException, Query, Request, Response
from pydantic import BaseModel, Field
from sqlalchemy import ColumnElement, delete, or_, select, tuple_, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from ulid import ULID
from weft_platform.internal_auth import caller_user
from weft_storage.memory.models import ChatSession, Message

from weft_memory.rollback import UnknownMessage, delete_turn, roll_back_workspace, truncate_from
from weft_memory.workspaces import Workspaces


class SessionCreate(BaseModel):
    """A new session."""

    tenant_id: str = Field(min_length=1)
    user_id: str = Field(min_length=1)
    title: str = Field(default="", max_length=500)
    agent_id: str | None = None


class SessionPatch(BaseModel):
    """Fields of a session that can change; absent fields stay as they are."""

    title: str | None = Field(default=None, max_length=500)
    agent_id: str | None = Field(default=None, max_length=64)


class SessionOut(BaseModel):
    """A session as the API shows it."""

    id: str
    tenant_id: str
    user_id: str
    title: str
    agent_id: str | None
    created_at: datetime
    updated_at: datetime


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
    is_partial: bool
    duration_ms: int
    agent_steps: list[dict[str, Any]]
    references: list[dict[str, Any]]
    images: list[dict[str, Any]] = Field(
        default_factory=list,
        description="User messages (SPEC E-26): [{url, description}], description set "
        "when a VLM read the image for a model without vision.",
    )
    created_at: datetime


async def get_owned(
    s: AsyncSession, tenant_id: str, session_id: str, *, user_id: str
) -> ChatSession:
    """The live session ``session_id`` of this user of ``tenant_id``, or 404 (another
    user's session is not told apart from a missing one)."""
    return await _live(
        s, session_id, ChatSession.tenant_id == tenant_id, ChatSession.user_id == user_id
    )


async def get_in_tenant(
    s: AsyncSession, tenant_id: str, session_id: str, *, user_id: str | None
) -> ChatSession:
    """The live session ``session_id`` of ``tenant_id`` or 404, owned by ``user_id`` when
    one is given: routes that name no user (the engine's history and context checkpoints)
    pass the caller's (``caller_user``), so a request credential reaches its own user's
    sessions only, whatever the request names."""
    scope = [ChatSession.tenant_id == tenant_id]
    if user_id is not None:
        scope.append(ChatSession.user_id == user_id)
    return await _live(s, session_id, *scope)


async def _live(s: AsyncSession, session_id: str, *scope: ColumnElement[bool]) -> ChatSession:
    row = await s.scalar(
        select(ChatSession).where(
            ChatSession.id == session_id, ChatSession.deleted_at.is_(None), *scope
        )
    )
    if row is None:
        raise HTTPException(404, f"session {session_id!r} not found")
    return row


SEARCH_MAX_CHARS = 200
"""Longest session search text: a search is a substring scan of the user's messages, so an
unbounded pattern is refused (422) rather than run."""


def session_matches(tenant_id: str, text: str) -> ColumnElement[bool]:
    """The session's title or one of its messages contains ``text``, case-insensitively.
    ``autoescape`` makes ``%``, ``_`` and the escape character literal, so a query never
    acts as a pattern; the message must be the same tenant's (messages carry their own
    ``tenant_id``), and the session's own scope (tenant, user) is the caller's filter."""
    in_messages = (
        select(Message.id)
        .where(
            Message.session_id == ChatSession.id,
            Message.tenant_id == tenant_id,
            Message.content.icontains(text, autoescape=True),
        )
        .exists()
    )
    return or_(ChatSession.title.icontains(text, autoescape=True), in_messages)


UserQuery = Query(min_length=1, description="The caller; another user's session is 404.")


def session_router(sessions: async_sessionmaker[AsyncSession], workspaces: Workspaces) -> APIRouter:
    """Session CRUD and message listing under ``/internal``; ``workspaces``: the sandbox,
    whose workspace follows a deletion of messages."""
    router = APIRouter(prefix="/internal", tags=["internal"])

    @router.post("/sessions", status_code=201, response_model=SessionOut)
    async def create_session(body: SessionCreate) -> ChatSession:
        row = ChatSession(id=f"ses_{ULID()}", **body.model_dump())
        async with sessions.begin() as s:
            s.add(row)
        async with sessions() as s:
            return await get_owned(s, body.tenant_id, row.id, user_id=body.user_id)

    @router.get("/sessions", response_model=list[SessionOut])
    async def list_sessions(
        request: Request,
        tenant_id: str = Query(min_length=1),
        user_id: str | None = Query(default=None, min_length=1),
        limit: int = Query(default=20, ge=1, le=100),
        offset: int = Query(default=0, ge=0),
        q: str | None = Query(
            default=None,
            min_length=1,
            max_length=SEARCH_MAX_CHARS,
            description="Only sessions whose title or a message contains this text "
            "(case-insensitive; every character literal, % and _ included).",
        ),
    ) -> list[ChatSession]:
        stmt = select(ChatSession).where(
            ChatSession.tenant_id == tenant_id, ChatSession.deleted_at.is_(None)
        )
        user_id = user_id or caller_user(request)
        if user_id is not None:
            stmt = stmt.where(ChatSession.user_id == user_id)
        if q is not None:
            stmt = stmt.where(session_matches(tenant_id, q))
        stmt = stmt.order_by(ChatSession.updated_at.desc(), ChatSession.id.desc())
        async with sessions() as s:
            return list((await s.scalars(stmt.limit(limit).offset(offset))).all())

    @router.get("/sessions/{session_id}", response_model=SessionOut)
    async def get_session(
        session_id: str, tenant_id: str = Query(min_length=1), user_id: str = UserQuery
    ) -> ChatSession:
        async with sessions() as s:
            return await get_owned(s, tenant_id, session_id, user_id=user_id)

    @router.patch("/sessions/{session_id}", response_model=SessionOut)
    async def patch_session(
        session_id: str,
        body: SessionPatch,
        tenant_id: str = Query(min_length=1),
        user_id: str = UserQuery,
    ) -> ChatSession:
        async with sessions.begin() as s:
            row = await get_owned(s, tenant_id, session_id, user_id=user_id)
            for name, value in body.model_dump(exclude_unset=True).items():
                if name == "title" and value is None:
                    continue  # title is NOT NULL: an explicit null leaves it unchanged
                setattr(row, name, value)
            row.updated_at = datetime.now(UTC)
        return row

    @router.delete("/sessions/{session_id}", status_code=204)
    async def delete_session(
        session_id: str, tenant_id: str = Query(min_length=1), user_id: str = UserQuery
    ) -> Response:
        async with sessions.begin() as s:
            row = await get_owned(s, tenant_id, session_id, user_id=user_id)
            row.deleted_at = datetime.now(UTC)
        return Response(status_code=204)

    @router.delete("/sessions/{session_id}/messages", status_code=204)
    async def clear_messages(
        session_id: str,
        tenant_id: str = Query(min_length=1),
        user_id: str = UserQuery,
        from_: str | None = Query(
            default=None, alias="from", min_length=1,
            description="Rollback: delete this message's turn and everything after it.",
        ),
    ) -> Response:  # fmt: skip
        """Delete every message, or truncate the session from a turn on (SPEC M-07)."""
        async with sessions.begin() as s:
            await get_owned(s, tenant_id, session_id, user_id=user_id)
            if from_ is None:
                await s.execute(
                    delete(Message).where(
                        Message.session_id == session_id, Message.tenant_id == tenant_id
                    )
                )
                await roll_back_workspace(s, workspaces, tenant_id, session_id)
            else:
                await _or_404(truncate_from(s, workspaces, tenant_id, session_id, from_))
            await _touch(s, session_id)
        return Response(status_code=204)

    @router.delete("/sessions/{session_id}/messages/{message_id}", status_code=204)
    async def delete_message(
        session_id: str,
        message_id: str,
        tenant_id: str = Query(min_length=1),
        user_id: str = UserQuery,
    ) -> Response:
        """Delete one turn (the message and the other half of its turn); checkpoints that
        summarise it are invalidated (SPEC M-07)."""
        async with sessions.begin() as s:
            await get_owned(s, tenant_id, session_id, user_id=user_id)
            await _or_404(delete_turn(s, workspaces, tenant_id, session_id, message_id))
            await _touch(s, session_id)
        return Response(status_code=204)

    @router.get("/sessions/{session_id}/messages", response_model=list[MessageOut])
    async def list_messages(
        session_id: str,
        tenant_id: str = Query(min_length=1),
        user_id: str = UserQuery,
        limit: int = Query(default=50, ge=1, le=200),
        before: str | None = Query(default=None, min_length=1),
    ) -> list[Message]:
        """The ``limit`` messages just older than ``before`` (or the newest), oldest first."""
        async with sessions() as s:
            await get_owned(s, tenant_id, session_id, user_id=user_id)
            stmt = select(Message).where(
                Message.session_id == session_id, Message.tenant_id == tenant_id
            )
            if before is not None:
                cursor = await _cursor(s, tenant_id, session_id, before)
                stmt = stmt.where(tuple_(Message.created_at, Message.id) < cursor)
            stmt = stmt.order_by(Message.created_at.desc(), Message.id.desc()).limit(limit)
            rows = list((await s.scalars(stmt)).all())
        return list(reversed(rows))

    return router


async def _touch(s: AsyncSession, session_id: str) -> None:
    await s.execute(
        update(ChatSession).where(ChatSession.id == session_id).values(updated_at=datetime.now(UTC))
    )


async def _or_404(deletion: Awaitable[int]) -> int:
    try:
        return await deletion
    except UnknownMessage as exc:
        raise HTTPException(404, f"message {exc.args[0]!r} not found in this session") from None


async def _cursor(
    s: AsyncSession, tenant_id: str, session_id: str, message_id: str
) -> tuple[datetime, str]:
    row = await s.scalar(
        select(Message).where(
            Message.id == message_id,
            Message.session_id == session_id,
            Message.tenant_id == tenant_id,
        )
    )
    if row is None:
        raise HTTPException(404, f"message {message_id!r} not found in this session")
    return row.created_at, row.id
