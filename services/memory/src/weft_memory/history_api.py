"""Internal routes the engine calls for context: history (SPEC M-08) and checkpoints (M-07)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter, HTTPException, Query, Request, Response
from pydantic import BaseModel, Field, model_validator
from redis.asyncio import Redis
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from weft_context.tokens import clamp_scale
from weft_platform.internal_auth import caller_user
from weft_storage.memory.models import Message

from weft_memory.api import get_in_tenant
from weft_memory.history import History, HistoryLoader, HistoryQuery
from weft_memory.turn_ends import wait_turn_end

DEFAULT_MAX_TURNS = 5


class TurnOut(BaseModel):
    """Where one stored turn sits in ``messages``; ``turn_id`` is what a checkpoint names."""

    turn_id: str
    request_id: str
    start: int
    count: int
    tokens: int


class HistoryOut(BaseModel):
    """LLM-ready history: ``messages`` already starts with the summary message, if any."""

    messages: list[dict[str, Any]]
    summary: str | None = None
    checkpoint_turn_id: str | None = None
    tokens: int = 0
    token_scale: float | None = None
    turns: list[TurnOut] = Field(default_factory=list)
    previous_turn_stored: bool | None = Field(
        default=None,
        description="With ``after``: whether that turn's end was stored in time to be in "
        "this history (false: the wait ran out and the history may miss it).",
    )

    @classmethod
    def of(cls, history: History, previous_turn_stored: bool | None = None) -> HistoryOut:
        """Flatten ``history`` and index its turns."""
        turns, start = [], 1 if history.summary is not None else 0
        for turn in history.turns:
            turns.append(
                TurnOut(
                    turn_id=turn.turn_id, request_id=turn.request_id, start=start,
                    count=len(turn.messages), tokens=turn.tokens,
                )
            )  # fmt: skip
            start += len(turn.messages)
        return cls(
            messages=history.messages,
            summary=history.summary,
            checkpoint_turn_id=history.checkpoint_turn_id,
            tokens=history.tokens,
            token_scale=history.token_scale,
            turns=turns,
            previous_turn_stored=previous_turn_stored,
        )


class TurnContextIn(BaseModel):
    """What the engine stores on a stored turn's assistant message."""

    summary: str | None = Field(default=None, description="compaction checkpoint (SPEC M-07)")
    degraded: bool = False
    tokens_before: int = Field(default=0, ge=0)
    tokens_after: int = Field(default=0, ge=0)
    token_scale: float | None = Field(default=None, gt=0, description="SPEC M-02")

    @model_validator(mode="after")
    def _something(self) -> TurnContextIn:
        if self.summary is None and self.token_scale is None:
            raise ValueError("give a summary, a token_scale or both")
        return self


def history_router(
    sessions: async_sessionmaker[AsyncSession], redis: Redis | None = None, wait_s: float = 5.0
) -> APIRouter:
    """Routes under ``/internal/sessions/{id}`` used by the engine; a history request
    naming the session's previous turn waits up to ``wait_s`` for its end (``turn_ends``)."""
    router = APIRouter(prefix="/internal", tags=["internal"])
    loader = HistoryLoader(sessions)

    @router.get("/sessions/{session_id}/history", response_model=HistoryOut)
    async def get_history(
        request: Request,
        session_id: str,
        tenant_id: str = Query(min_length=1),
        max_turns: int | None = Query(default=None, ge=0, le=1000),
        token_budget: int | None = Query(default=None, ge=1),
        retain_retrieval_history: bool = False,
        vision: bool = Query(default=False, description="Images as image parts (SPEC E-26)."),
        after: str | None = Query(
            default=None,
            min_length=1,
            description="Request id of the session's previous turn: answer once its end "
            "is stored (read-your-writes for a turn that starts as the previous one ends).",
        ),
    ) -> HistoryOut:
        """Without ``token_budget``: the last ``max_turns`` (default 5) turns, as before.
        With it (agent mode, SPEC M-08): as many contiguous recent turns as fit."""
        async with sessions() as s:
            await get_in_tenant(s, tenant_id, session_id, user_id=caller_user(request))
        stored = None
        if after is not None:
            stored = await wait_turn_end(sessions, redis, tenant_id, after, wait_s)
        if token_budget is None and max_turns is None:
            max_turns = DEFAULT_MAX_TURNS
        query = HistoryQuery(
            token_budget=token_budget,
            max_turns=max_turns,
            retain_retrieval_history=retain_retrieval_history,
            vision=vision,
        )
        return HistoryOut.of(await loader.build(tenant_id, session_id, query), stored)

    @router.put("/sessions/{session_id}/turns/{turn_id}/context", status_code=204)
    async def put_turn_context(
        request: Request,
        session_id: str,
        turn_id: str,
        body: TurnContextIn,
        tenant_id: str = Query(min_length=1),
    ) -> Response:
        """Store a checkpoint and/or a token scale on the assistant message ``turn_id`` (or
        the assistant message of request ``turn_id``); 404 when none matches (SPEC M-07)."""
        async with sessions.begin() as s:
            await get_in_tenant(s, tenant_id, session_id, user_id=caller_user(request))
            row = await _assistant_of(s, tenant_id, session_id, turn_id)
            if body.summary is not None:
                row.context_checkpoint = {
                    "summary": body.summary,
                    "degraded": body.degraded,
                    "tokens_before": body.tokens_before,
                    "tokens_after": body.tokens_after,
                    "created_at": datetime.now(UTC).isoformat(),
                }
            if body.token_scale is not None:
                row.context_token_scale = clamp_scale(body.token_scale)
        return Response(status_code=204)

    return router


async def _assistant_of(s: AsyncSession, tenant_id: str, session_id: str, key: str) -> Message:
    stmt = select(Message).where(
        Message.session_id == session_id,
        Message.tenant_id == tenant_id,
        Message.role == "assistant",
        (Message.id == key) | (Message.request_id == key),
    )
    row = await s.scalar(stmt.with_for_update())
    if row is None:
        raise HTTPException(404, f"no assistant message {key!r} in this session")
    return row
