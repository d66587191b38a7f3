"""Internal HTTP API of suggestions (SPEC Q-05), reached through the gateway.

Every route acts for the tenant and user of the caller's request credential
(``InternalAuth``) and finds the message through that user's session of that tenant: a
message of another tenant, user or session answers 404, exactly as a missing one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from fastapi import APIRouter, HTTPException, Query, Request
from pydantic import BaseModel, Field
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from ulid import ULID
from weft_contracts import SuggestedQuestion, SuggestionPlacement
from weft_contracts.locale import LOCALE_PATTERN
from weft_platform.session_owner import OwnerUnknown, SessionOwners
from weft_storage.suggestions.models import MessageSuggestionSet, SuggestionEvent

from weft_suggestions.agent_settings import SettingsUnavailable
from weft_suggestions.config import FollowUpConfig, UnknownAgent
from weft_suggestions.starters import StarterSets
from weft_suggestions.turns import FinishedTurn, TurnLog
from weft_suggestions.worker import SuggestionWorker

SetState = Literal["disabled", "pending", "generating", "ready", "suppressed", "failed"]
"""``disabled``: follow-ups are off for the agent; ``pending``: the turn's end is not
processed yet; the others are the set's own states (SPEC Q-04)."""


class SuggestionSetOut(BaseModel):
    """The follow-ups of one assistant message."""

    assistant_message_id: str
    placement: SuggestionPlacement
    locale: str
    state: SetState
    questions: list[SuggestedQuestion] = Field(default_factory=list)
    reason: str = ""
    allow_regenerate: bool = False


class RegenerateIn(BaseModel):
    """Ask for new follow-ups of a message (when the agent allows it, SPEC Q-02)."""

    tenant_id: str = Field(min_length=1, max_length=128)
    user_id: str = Field(min_length=1, max_length=128)
    assistant_message_id: str = Field(min_length=2, max_length=128)


class SuggestionEventIn(BaseModel):
    """What the user did with a suggestion (SPEC Q-05)."""

    tenant_id: str = Field(min_length=1, max_length=128)
    user_id: str = Field(min_length=1, max_length=128)
    assistant_message_id: str = Field(min_length=2, max_length=128)
    placement: SuggestionPlacement = "follow_up"
    question_id: str | None = Field(default=None, max_length=64)
    kind: Literal["impression", "click", "dismiss", "regenerate"]


class SuggestionEventOut(BaseModel):
    """The stored event."""

    id: str


NOT_FOUND = "message not found"


async def _require_owner(
    owners: SessionOwners, request: Request, tenant_id: str, user_id: str, session_id: str
) -> None:
    """404 unless memory (asked with this request's credential) finds a live session of
    that tenant and user; 503 when memory cannot say."""
    try:
        owned = await owners.owns(
            request.headers.get("authorization"), tenant_id, user_id, session_id
        )
    except OwnerUnknown as exc:
        raise HTTPException(503, f"{exc}; retry", {"Retry-After": "2"}) from None
    if not owned:
        raise HTTPException(404, "session not found")


def suggestions_router(
    sessions: async_sessionmaker[AsyncSession],
    turns: TurnLog,
    worker: SuggestionWorker,
    owners: SessionOwners,
) -> APIRouter:
    """GET/POST suggestions and POST suggestion-events; ``owners``: memory, asked whether
    a starter event's session is the caller's."""
    router = APIRouter(prefix="/internal", tags=["suggestions"])

    async def owned(tenant_id: str, user_id: str, session_id: str, message_id: str) -> FinishedTurn:
        turn = await turns.owner_turn(tenant_id, user_id, session_id, message_id)
        if turn is None:
            raise HTTPException(404, NOT_FOUND)
        return turn

    async def config_of(turn: FinishedTurn) -> FollowUpConfig:
        try:
            return await worker.configs.follow_ups(turn.tenant_id, turn.agent_id)
        except SettingsUnavailable as exc:
            raise HTTPException(503, str(exc)[:300], {"Retry-After": "2"}) from None

    async def current(turn: FinishedTurn) -> SuggestionSetOut:
        config = await config_of(turn)
        key = worker.key(turn, config)
        base = SuggestionSetOut(
            assistant_message_id=key.assistant_message_id,
            placement="follow_up",
            locale=key.locale,
            state="disabled" if not config.enabled else "pending",
            allow_regenerate=config.enabled and config.allow_regenerate,
        )
        if not config.enabled:
            return base
        async with sessions() as s:
            row = await s.get(
                MessageSuggestionSet,
                (
                    key.tenant_id,
                    key.assistant_message_id,
                    key.placement,
                    key.config_hash,
                    key.locale,
                ),
            )
        if row is None:
            return base
        return base.model_copy(
            update={
                "state": row.state,
                "questions": [SuggestedQuestion.model_validate(q) for q in row.questions],
                "reason": row.reason,
            }
        )

    @router.get("/sessions/{session_id}/suggestions", response_model=SuggestionSetOut)
    async def get_suggestions(
        session_id: str,
        tenant_id: str = Query(min_length=1),
        user_id: str = Query(min_length=1),
        assistant_message_id: str = Query(min_length=2, max_length=128),
    ) -> SuggestionSetOut:
        turn = await owned(tenant_id, user_id, session_id, assistant_message_id)
        return await current(turn)

    @router.post("/sessions/{session_id}/suggestions", response_model=SuggestionSetOut)
    async def regenerate(session_id: str, body: RegenerateIn) -> SuggestionSetOut:
        turn = await owned(body.tenant_id, body.user_id, session_id, body.assistant_message_id)
        config = await config_of(turn)
        if not (config.enabled and config.allow_regenerate):
            raise HTTPException(403, "this agent does not allow regenerating suggestions")
        claimed = await worker.claim_follow_ups(turn.tenant_id, turn.request_id, regenerate=True)
        if claimed is None:
            raise HTTPException(409, "the suggestions of this message are being generated")
        await _store_event(
            sessions, turn, body.assistant_message_id, "follow_up", None, "regenerate"
        )
        await worker.generate(claimed.claim, claimed.config)
        return await current(turn)

    @router.post(
        "/sessions/{session_id}/suggestion-events",
        status_code=201,
        response_model=SuggestionEventOut,
    )
    async def record_event(
        request: Request, session_id: str, body: SuggestionEventIn
    ) -> SuggestionEventOut:
        if body.placement == "starter":
            # Starters have no turn: the set is the agent's (``agent:<id>``) and the session
            # is the one the gateway found among the caller's own.
            if not body.assistant_message_id.startswith("agent:"):
                raise HTTPException(422, "a starter event names its set as agent:<agent id>")
            await _require_owner(owners, request, body.tenant_id, body.user_id, session_id)
            where = FinishedTurnRef(body.tenant_id, session_id, body.user_id)
        else:
            turn = await owned(body.tenant_id, body.user_id, session_id, body.assistant_message_id)
            where = FinishedTurnRef(turn.tenant_id, turn.session_id, turn.user_id)
        event_id = await _store_event(
            sessions, where, body.assistant_message_id, body.placement, body.question_id, body.kind
        )
        return SuggestionEventOut(id=event_id)

    return router


@dataclass(frozen=True)
class FinishedTurnRef:
    """Whose session an event is recorded in."""

    tenant_id: str
    session_id: str
    user_id: str


async def _store_event(
    sessions: async_sessionmaker[AsyncSession],
    turn: FinishedTurnRef | FinishedTurn,
    assistant_message_id: str,
    placement: str,
    question_id: str | None,
    kind: str,
) -> str:
    event_id = str(ULID())
    async with sessions.begin() as s:
        s.add(
            SuggestionEvent(
                id=event_id,
                tenant_id=turn.tenant_id,
                session_id=turn.session_id,
                user_id=turn.user_id,
                assistant_message_id=assistant_message_id,
                placement=placement,
                question_id=question_id,
                kind=kind,
            )
        )
    return event_id


class StarterSetOut(BaseModel):
    """The starters of a session's agent (SPEC Q-01)."""

    agent_id: str
    placement: SuggestionPlacement = "starter"
    locale: str
    state: Literal["disabled", "generating", "ready", "suppressed", "failed"]
    questions: list[SuggestedQuestion] = Field(default_factory=list)
    reason: str = ""


def starters_router(starters: StarterSets, owners: SessionOwners | None = None) -> APIRouter:
    """``GET /internal/sessions/{session_id}/starters``: the session must be the caller's
    (memory says, asked with the caller's credential; the gateway checks it too;
    ``owners`` None: no check, for tests of the route alone); the agent is looked up as
    the caller's tenant runs it."""
    router = APIRouter(prefix="/internal", tags=["suggestions"])

    @router.get("/sessions/{session_id}/starters", response_model=StarterSetOut)
    async def get_starters(
        request: Request,
        session_id: str,
        tenant_id: str = Query(min_length=1, max_length=128),
        user_id: str = Query(min_length=1, max_length=128),
        agent_id: str = Query(min_length=1, max_length=64),
        locale: str | None = Query(default=None, max_length=35, pattern=LOCALE_PATTERN),
    ) -> StarterSetOut:
        if owners is not None:
            await _require_owner(owners, request, tenant_id, user_id, session_id)
        try:
            found = await starters.starters(tenant_id, session_id, agent_id, locale)
        except UnknownAgent:
            raise HTTPException(404, f"agent {agent_id!r} not found") from None
        except SettingsUnavailable as exc:
            raise HTTPException(503, str(exc)[:300], {"Retry-After": "2"}) from None
        return StarterSetOut.model_validate(found, from_attributes=True)

    return router
