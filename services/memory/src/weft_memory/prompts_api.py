"""Gateway-facing routes of prompts (SPEC H-03): list, read, decide.

Each acts for the caller's request credential (``InternalAuth``): a prompt the caller
may not see (``prompts.may_see``) is a 404, like one that does not exist.
"""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, HTTPException, Query, Request
from pydantic import BaseModel
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from weft_platform.credentials import RequestCredential
from weft_storage.memory.models_approvals import AgentPrompt

from weft_memory.decisions import (
    DecisionBody,
    DecisionDesk,
    DecisionRefused,
    DecisionResult,
    PromptNotFound,
)
from weft_memory.prompts import (
    DECIDE_SCOPE,
    WAITING,
    PromptView,
    decisions_of,
    may_see,
    visible_prompt,
)

MAX_LISTED = 500


class PromptList(BaseModel):
    """A session's prompts the caller may see, oldest first."""

    prompts: list[PromptView]


def request_caller(request: Request) -> RequestCredential:
    """The request credential ``InternalAuth`` verified for this request (401 for any
    other: these routes act for one user)."""
    credential = getattr(request.state, "credential", None)
    if not isinstance(credential, RequestCredential):
        raise HTTPException(401, "a request credential is required", {"WWW-Authenticate": "Bearer"})
    return credential


def prompts_router(sessions: async_sessionmaker[AsyncSession], desk: DecisionDesk) -> APIRouter:
    """``/internal/sessions/{session_id}/prompts``, ``/internal/prompts/{prompt_id}`` and
    its ``/decision``."""
    router = APIRouter(prefix="/internal", tags=["internal"])

    @router.get("/sessions/{session_id}/prompts", response_model=PromptList)
    async def list_prompts(
        session_id: str,
        request: Request,
        status: Literal["pending", "all"] = Query(default="pending"),
    ) -> PromptList:
        """The session's prompts (``pending``: still waiting, escalated included)."""
        caller = request_caller(request)
        query = select(AgentPrompt).where(
            AgentPrompt.tenant_id == caller.tenant_id, AgentPrompt.session_id == session_id
        )
        if DECIDE_SCOPE not in caller.scopes:  # in SQL: others' rows never fill the page
            query = query.where(AgentPrompt.user_id == caller.user_id)
        if status == "pending":
            query = query.where(AgentPrompt.status.in_(WAITING))
        async with sessions() as s:
            rows = await s.scalars(query.order_by(AgentPrompt.created_at).limit(MAX_LISTED))
            found = [PromptView.of(r) for r in rows if may_see(r, caller)]
        return PromptList(prompts=found)

    @router.get("/prompts/{prompt_id}", response_model=PromptView)
    async def get_prompt(prompt_id: str, request: Request) -> PromptView:
        """One prompt with every decision presented for it."""
        caller = request_caller(request)
        async with sessions() as s:
            row = await visible_prompt(s, prompt_id, caller)
            if row is None:
                raise HTTPException(404, f"no prompt {prompt_id!r}")
            return PromptView.of(row, await decisions_of(s, prompt_id))

    @router.post(
        "/prompts/{prompt_id}/decision",
        response_model=DecisionResult,
        responses={404: {"description": "no such prompt"}, 409: {"description": "refused"}},
    )
    async def decide(prompt_id: str, body: DecisionBody, request: Request) -> DecisionResult:
        """Apply the decision, or answer a repeat; 409 for a different one (kept)."""
        caller = request_caller(request)
        try:
            return await desk.decide(prompt_id, body, caller)
        except PromptNotFound:
            raise HTTPException(404, f"no prompt {prompt_id!r}") from None
        except DecisionRefused as exc:
            raise HTTPException(409, exc.reason) from None

    return router
