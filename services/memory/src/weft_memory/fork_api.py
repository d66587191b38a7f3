"""``POST /internal/sessions/{id}/fork``: a new session from an existing one's history and
workspace (SPEC S-03, M-07; :mod:`weft_memory.fork`)."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, Query
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from weft_storage.memory.models import ChatSession

from weft_memory.api import SessionOut, UserQuery, get_owned
from weft_memory.fork import TurnStillRunning, UnknownMessage, fork_session
from weft_memory.workspaces import Workspaces


class ForkBody(BaseModel):
    """Where to fork: the turn of ``at_message_id`` is the fork's last; none: every turn."""

    model_config = ConfigDict(extra="forbid")

    at_message_id: str | None = Field(
        default=None, min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.:-]+$"
    )


def fork_router(sessions: async_sessionmaker[AsyncSession], workspaces: Workspaces) -> APIRouter:
    """The fork route under ``/internal``."""
    router = APIRouter(prefix="/internal", tags=["internal"])

    @router.post("/sessions/{session_id}/fork", status_code=201, response_model=SessionOut)
    async def fork(
        session_id: str,
        body: ForkBody,
        tenant_id: str = Query(min_length=1),
        user_id: str = UserQuery,
    ) -> ChatSession:
        """Copy the session up to the turn of ``at_message_id`` (or whole) into a new
        session of the same user: messages, their compaction checkpoints, the workspace."""
        async with sessions.begin() as s:
            source = await get_owned(s, tenant_id, session_id, user_id=user_id)
            try:
                created = await fork_session(s, workspaces, source, body.at_message_id)
            except UnknownMessage as exc:
                raise HTTPException(
                    404, f"message {exc.args[0]!r} not found in this session"
                ) from None
            except TurnStillRunning as exc:
                raise HTTPException(
                    409, f"turn {exc.args[0]!r} is still running; fork after it ends"
                ) from None
            fork_id = created.id
        async with sessions() as s:
            return await get_owned(s, tenant_id, fork_id, user_id=user_id)

    return router
