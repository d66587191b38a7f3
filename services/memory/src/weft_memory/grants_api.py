"""Routes of grants (SPEC H-04): the engine reads a turn's live grants, the gateway lists,
creates and revokes the caller's. Every route acts for the caller's request credential's
tenant and user; another user's grant is a 404."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Literal

from fastapi import APIRouter, HTTPException, Query, Request, Response
from pydantic import BaseModel
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from weft_contracts import Grant

from weft_memory.grants import (
    GrantLifetimes,
    NewGrant,
    add_grant,
    grant_of,
    live_grants,
    revoke,
    user_grants,
)
from weft_memory.prompts_api import request_caller


class GrantList(BaseModel):
    """Grants, as ``weft_contracts.Grant``."""

    grants: list[Grant]


def grants_router(
    sessions: async_sessionmaker[AsyncSession], lifetimes: GrantLifetimes
) -> APIRouter:
    """``/internal/grants`` (list, create), ``/internal/grants/live``, and revoke."""
    router = APIRouter(prefix="/internal", tags=["internal"])

    @router.get("/grants/live", response_model=GrantList)
    async def live(
        request: Request,
        session_id: str = Query(min_length=1, max_length=128),
        agent_id: str = Query(min_length=1, max_length=128),
    ) -> GrantList:
        """The turn's user's grants that apply in this session of this agent now."""
        caller = request_caller(request)
        async with sessions() as s:
            found = await live_grants(
                s, tenant_id=caller.tenant_id, user_id=caller.user_id,
                session_id=session_id, agent_id=agent_id,
            )  # fmt: skip
        return GrantList(grants=found)

    @router.get("/grants", response_model=GrantList)
    async def list_grants(
        request: Request,
        status: Literal["live", "all"] = Query(default="live"),
        session_id: str | None = Query(default=None, min_length=1, max_length=128),
        agent_id: str | None = Query(default=None, min_length=1, max_length=128),
    ) -> GrantList:
        """The caller's grants (``all``: revoked and expired ones too), newest first; of
        one session or one agent when named."""
        caller = request_caller(request)
        async with sessions() as s:
            found = await user_grants(
                s, tenant_id=caller.tenant_id, user_id=caller.user_id, status=status,
                session_id=session_id, agent_id=agent_id,
            )  # fmt: skip
        return GrantList(grants=found)

    @router.post("/grants", response_model=Grant, status_code=201)
    async def create(body: NewGrant, request: Request) -> Grant:
        """An explicit grant for the caller (expiry default: the scope's lifetime)."""
        caller = request_caller(request)
        async with sessions.begin() as s:
            row = add_grant(
                s, tenant_id=caller.tenant_id, user_id=caller.user_id, spec=body,
                expires_at=body.expires_at or lifetimes.expiry(body.scope, datetime.now(UTC)),
            )  # fmt: skip
        return grant_of(row)

    @router.delete("/grants/{grant_id}", status_code=204)
    async def delete(grant_id: str, request: Request) -> Response:
        """Revoke one of the caller's grants (204 again for a revoked one)."""
        caller = request_caller(request)
        async with sessions.begin() as s:
            found = await revoke(
                s, tenant_id=caller.tenant_id, user_id=caller.user_id, grant_id=grant_id
            )
        if not found:
            raise HTTPException(404, f"no grant {grant_id!r}")
        return Response(status_code=204)

    return router
