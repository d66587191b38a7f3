"""A waiting turn's state, kept by memory so the wait survives the loss of Redis (SPEC H-02).

The engine stores the suspended turn with the turn's own request credential (its tenant,
session and request must be the row's) and reads it back the same way; the engine's turn
auditor, restoring a waiting turn after Redis lost it, reads any with its service
credential (scope ``memory:suspensions.read``). The state is opaque here (the engine's
compressed JSON, base64 on the wire); a newer ``version`` replaces an older one, never the
reverse. The turn's ``complete`` deletes the row (``prompts.turn_ended``).
"""

from __future__ import annotations

import base64
import binascii

from fastapi import APIRouter, HTTPException, Request, Response
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import delete, func, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from weft_platform.credentials import RequestCredential, ServiceCredential
from weft_platform.internal_auth import SystemRoute
from weft_storage.memory.models_approvals import RunSuspension

from weft_memory.prompts_api import request_caller

SUSPENSION_ROUTE = "/internal/turns/{request_id}/suspension"
SUSPENSION_READ = SystemRoute(
    "memory:suspensions.read", frozenset({"engine", "operator"}), also_requests=True
)
"""The auditor's service credential reads any suspension; a turn's credential its own."""
MAX_BODY_BYTES = 8 * 1024 * 1024
"""The largest suspension body (``BodyLimit`` answers 413 above it)."""


class SuspensionBody(BaseModel):
    """``PUT``: the engine's state of the turn at ``version``."""

    model_config = ConfigDict(extra="forbid")

    version: int = Field(ge=0, le=2**31 - 1)
    state: str = Field(min_length=1, description="base64 of the engine's opaque state.")


class SuspensionView(SuspensionBody):
    """``GET``: the newest state stored, with the turn's tenant and session."""

    tenant_id: str
    session_id: str


def suspensions_router(sessions: async_sessionmaker[AsyncSession]) -> APIRouter:
    """``PUT``, ``GET`` and ``DELETE`` of :data:`SUSPENSION_ROUTE`."""
    router = APIRouter(tags=["internal"])

    @router.put(SUSPENSION_ROUTE, status_code=204)
    async def put_suspension(request_id: str, body: SuspensionBody, request: Request) -> Response:
        """Store the state unless a newer version is stored already."""
        caller = _turn(request_caller(request), request_id)
        try:
            state = base64.b64decode(body.state, validate=True)
        except (binascii.Error, ValueError):
            raise HTTPException(422, "state must be base64") from None
        assert caller.session_id is not None  # _turn checked it
        stmt = insert(RunSuspension).values(
            request_id=request_id, tenant_id=caller.tenant_id, session_id=caller.session_id,
            version=body.version, state=state,
        )  # fmt: skip
        stmt = stmt.on_conflict_do_update(
            index_elements=[RunSuspension.request_id],
            set_={"version": body.version, "state": state, "updated_at": func.now()},
            where=(RunSuspension.version < body.version)
            & (RunSuspension.tenant_id == caller.tenant_id)
            & (RunSuspension.session_id == caller.session_id),
        )
        async with sessions.begin() as s:
            await s.execute(stmt)
        return Response(status_code=204)

    @router.get(SUSPENSION_ROUTE, response_model=SuspensionView)
    async def get_suspension(request_id: str, request: Request) -> SuspensionView:
        """The stored state (404: none, or not this turn's credential's)."""
        credential = getattr(request.state, "credential", None)
        async with sessions() as s:
            row = await s.scalar(
                select(RunSuspension).where(RunSuspension.request_id == request_id)
            )
        if row is None or not _may_read(credential, row):
            raise HTTPException(404, f"no suspended turn {request_id!r}")
        return SuspensionView(
            version=row.version,
            state=base64.b64encode(row.state).decode(),
            tenant_id=row.tenant_id,
            session_id=row.session_id,
        )

    @router.delete(SUSPENSION_ROUTE, status_code=204)
    async def delete_suspension(request_id: str, request: Request) -> Response:
        """Forget the state once nobody is asked any more: only with the turn's own
        credential; any other request credential finds nothing (404, like a read)."""
        caller = request_caller(request)
        if caller.request_id != request_id or caller.session_id is None:
            raise HTTPException(404, f"no suspended turn {request_id!r}")
        async with sessions.begin() as s:
            await s.execute(
                delete(RunSuspension).where(
                    RunSuspension.request_id == request_id,
                    RunSuspension.tenant_id == caller.tenant_id,
                    RunSuspension.session_id == caller.session_id,
                )
            )
        return Response(status_code=204)

    return router


def _turn(caller: RequestCredential, request_id: str) -> RequestCredential:
    """403 unless ``caller`` is this turn's credential (session and request named)."""
    if caller.request_id != request_id or caller.session_id is None:
        raise HTTPException(403, "credential is for another turn")
    return caller


def _may_read(credential: object, row: RunSuspension) -> bool:
    if isinstance(credential, ServiceCredential):
        return True  # InternalAuth checked its scope and issuer
    if not isinstance(credential, RequestCredential):
        return False
    return (
        credential.tenant_id == row.tenant_id
        and credential.session_id == row.session_id
        and credential.request_id == row.request_id
    )
