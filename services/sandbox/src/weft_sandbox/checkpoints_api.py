"""``POST /internal/checkpoints/fork`` and ``POST /internal/checkpoints/rollback``: memory's
fork and rollback move the workspace with the history (SPEC S-03, M-07) by asking the
sandbox, which owns ``sandbox_checkpoints`` (docs/sandbox.md "Fork and rollback").

System routes: memory has already found the session among the caller's own, so it calls
with its own service credential (issuer ``memory``, scope ``sandbox:checkpoints``); a
request credential opens neither, so a user's credential can never name another user's
session here. Both are idempotent: memory calls them *before* it commits its own rows and
may call again after a failure.

- fork copies the source's checkpoints of the named turns to the target session (a new
  id memory made). The target's rows are the natural key: a repeat that finds them as it
  would write them answers the same count; a target holding other rows is 409.
- rollback points the session's workspace at the last checkpoint of the remaining turns
  (or at an empty workspace); a repeat finds the workspace already there and adds no row.
"""

# No ``from __future__ import annotations``: FastAPI reads the route annotations.

from typing import Annotated

from fastapi import APIRouter, HTTPException
from pydantic import BaseModel, ConfigDict, Field, StringConstraints
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from weft_platform.internal_auth import SystemRoute
from weft_storage.sandbox import checkpoints

SCOPE = "sandbox:checkpoints"
ROUTE = SystemRoute(SCOPE, frozenset({"memory", "operator"}))
FORK_PATH = "/internal/checkpoints/fork"
ROLLBACK_PATH = "/internal/checkpoints/rollback"
SYSTEM_ROUTES = {FORK_PATH: ROUTE, ROLLBACK_PATH: ROUTE}
MAX_TURNS = 20_000
"""Turns one request may name (a session's whole history)."""

Id = Annotated[str, StringConstraints(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.:-]+$")]


class ForkBody(BaseModel):
    """Copy ``source_session_id``'s checkpoints of ``turns`` (source request id -> the
    fork's request id) to ``target_session_id``."""

    model_config = ConfigDict(extra="forbid")

    tenant_id: Id
    source_session_id: Id
    target_session_id: Id
    turns: dict[Id, Id] = Field(max_length=MAX_TURNS)


class ForkOut(BaseModel):
    """Rows the target holds (0: the fork starts with an empty workspace)."""

    copied: int


class RollbackBody(BaseModel):
    """Point ``session_id``'s workspace at the last checkpoint of ``remaining`` turns."""

    model_config = ConfigDict(extra="forbid")

    tenant_id: Id
    session_id: Id
    remaining: list[Id] = Field(max_length=MAX_TURNS)


class RollbackOut(BaseModel):
    """The new checkpoint's number; None: the workspace was already there."""

    seq: int | None


def checkpoints_router(sessions: async_sessionmaker[AsyncSession]) -> APIRouter:
    """The two routes."""
    router = APIRouter(tags=["internal"])

    @router.post(FORK_PATH, response_model=ForkOut)
    async def fork(body: ForkBody) -> ForkOut:
        if body.source_session_id == body.target_session_id:
            raise HTTPException(422, "a fork's target must be another session")
        for _ in range(2):  # a concurrent repeat may insert first: then compare with it
            try:
                async with sessions.begin() as s:
                    return ForkOut(copied=await _fork_once(s, body))
            except IntegrityError:
                continue
        raise HTTPException(409, "the fork's target session is being written; retry")

    @router.post(ROLLBACK_PATH, response_model=RollbackOut)
    async def rollback(body: RollbackBody) -> RollbackOut:
        async with sessions.begin() as s:
            seq = await checkpoints.roll_back(s, body.tenant_id, body.session_id, body.remaining)
        return RollbackOut(seq=seq)

    return router


async def _fork_once(s: AsyncSession, body: ForkBody) -> int:
    existing = await checkpoints.rows(s, body.tenant_id, body.target_session_id)
    if not existing:
        return await checkpoints.fork(
            s, body.tenant_id, body.source_session_id, body.target_session_id, body.turns
        )
    source = await checkpoints.rows(s, body.tenant_id, body.source_session_id)
    expected = [body.turns[r.request_id] for r in source if r.request_id in body.turns]
    if [r.request_id for r in existing] != expected:
        raise HTTPException(409, f"session {body.target_session_id!r} already has a workspace")
    return len(existing)  # a repeat of the same fork
