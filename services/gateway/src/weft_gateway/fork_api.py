"""``POST /api/v1/sessions/{id}/fork``: a new session with the history, compaction
checkpoints and workspace of an existing one up to a turn (SPEC S-03, M-07). memory does
the copy in one transaction and checks ownership (tenant and user: 404 otherwise)."""

# No ``from __future__ import annotations``: FastAPI must see the route annotations.

from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends
from pydantic import BaseModel, ConfigDict, Field

from weft_gateway.api import Gateway
from weft_gateway.auth import ApiKeyAuth, Principal
from weft_gateway.routes import Id


class ForkBody(BaseModel):
    """Body of ``POST /sessions/{id}/fork``."""

    model_config = ConfigDict(extra="forbid")

    at_message_id: str | None = Field(
        default=None, min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.:-]+$",
        description="The fork ends with this message's turn; absent: the whole session.",
    )  # fmt: skip


def fork_router(gw: Gateway, auth: ApiKeyAuth) -> APIRouter:
    """The fork route."""
    router = APIRouter(prefix="/api/v1", tags=["sessions"])
    Who = Annotated[Principal, Depends(auth)]

    @router.post("/sessions/{session_id}/fork", status_code=201)
    async def fork_session(
        who: Who, session_id: Id, body: Annotated[ForkBody | None, Body()] = None
    ) -> Any:
        at = body.at_message_id if body is not None else None
        session = await gw.memory.fork_session(who.tenant_id, who.user_id, session_id, at)
        await gw.directory.remember(session)
        return session

    return router
