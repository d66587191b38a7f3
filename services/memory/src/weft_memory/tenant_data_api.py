"""memory's routes for the gateway's tenant and user purges and retention: the shared
owner purge (``weft_storage.owner_purge``) of memory's tables, plus what only memory
knows (a tenant's or user's sessions and their turns, whose Redis keys the gateway
deletes and whose rows in other owners' tables a user purge names) and the retention of
old messages. Gateway-only system routes (scope ``memory:tenant-data``)."""

from __future__ import annotations

from functools import partial
from typing import Annotated

from fastapi import APIRouter, Query
from pydantic import BaseModel, Field
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from weft_platform.credentials import CredentialVerifier
from weft_storage.memory.tenant_data import (
    delete_messages_older_than,
    request_ids,
    session_ids,
)
from weft_storage.owner_purge import (
    MAX_SESSIONS,
    USER_ID,
    SessionId,
    TenantId,
    owner_purge_router,
)

SERVICE = "memory"
MAX_RETENTION_DAYS = 100 * 365


class SessionIds(BaseModel):
    """A tenant's or user's sessions (deleted ones included)."""

    session_ids: list[str]


class TurnsQuery(BaseModel):
    """Body of ``POST .../turn-ids``: the sessions whose turns are wanted."""

    session_ids: list[SessionId] = Field(max_length=MAX_SESSIONS)


class TurnIds(BaseModel):
    """The turns (``request_id``) of the named sessions."""

    request_ids: list[str]


class Retained(BaseModel):
    """What a retention run deleted."""

    deleted: dict[str, int]


def _memory_routes(sessions: async_sessionmaker[AsyncSession], router: APIRouter) -> None:
    @router.get("/internal/tenants/{tenant_id}/session-ids")
    async def tenant_sessions(
        tenant_id: TenantId,
        user_id: Annotated[str | None, Query(min_length=1, max_length=128, pattern=USER_ID)] = None,
    ) -> SessionIds:
        return SessionIds(session_ids=await session_ids(sessions, tenant_id, user_id))

    @router.post("/internal/tenants/{tenant_id}/turn-ids")
    async def session_turns(tenant_id: TenantId, body: TurnsQuery) -> TurnIds:
        return TurnIds(request_ids=await request_ids(sessions, tenant_id, body.session_ids))

    @router.delete("/internal/tenants/{tenant_id}/messages")
    async def retain_messages(
        tenant_id: TenantId,
        older_than_days: Annotated[float, Query(gt=0, le=MAX_RETENTION_DAYS)],
    ) -> Retained:
        """Delete the tenant's messages older than ``older_than_days`` (retention)."""
        deleted = await delete_messages_older_than(sessions, tenant_id, older_than_days)
        return Retained(deleted={"messages": deleted})


def tenant_data_router(
    sessions: async_sessionmaker[AsyncSession], verifier: CredentialVerifier
) -> APIRouter:
    """Every gateway-only purge and retention route of memory."""
    return owner_purge_router(
        SERVICE, sessions, verifier, extra=[partial(_memory_routes, sessions)]
    )
