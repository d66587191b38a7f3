"""Suggested questions in the public API (SPEC Q-01..Q-05), proxied to the suggestions
service's internal API with the caller's tenant and user (from the API key, never from the
request) and the request credential of the call (``suggestions`` is in its audience).

Isolation is checked twice: the gateway finds the session in the caller's own sessions
(the session directory: 404 for another tenant's or user's session), and the suggestions
service finds the message in that user's session of that tenant (404 otherwise).
"""

# No ``from __future__ import annotations``: FastAPI must see the route annotations.

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Header, Path, Query
from pydantic import BaseModel, ConfigDict, Field, model_validator
from weft_contracts import Locale, preferred_locale

from weft_gateway.api import QUICK_ANSWER_AGENT
from weft_gateway.auth import ApiKeyAuth, Principal
from weft_gateway.clients import ServiceClient
from weft_gateway.session_cache import SessionDirectory

Id = Annotated[str, Path(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.:-]+$")]
MessageId = Annotated[str, Query(min_length=2, max_length=128, pattern=r"^[A-Za-z0-9_.:-]+$")]


class RegenerateBody(BaseModel):
    """Body of ``POST /sessions/{id}/suggestions``: new follow-ups for a message."""

    model_config = ConfigDict(extra="forbid")  # the tenant and user come from the key

    assistant_message_id: str = Field(min_length=2, max_length=128)


class SuggestionEventBody(BaseModel):
    """Body of ``POST /sessions/{id}/suggestion-events`` (SPEC Q-05)."""

    model_config = ConfigDict(extra="forbid")

    assistant_message_id: str | None = Field(
        default=None, min_length=2, max_length=128, description="Required for a follow-up."
    )
    placement: Literal["follow_up", "starter"] = "follow_up"
    question_id: str | None = Field(default=None, max_length=64)
    kind: Literal["impression", "click", "dismiss", "regenerate"]

    @model_validator(mode="after")
    def _message_of_a_follow_up(self) -> "SuggestionEventBody":
        if self.placement == "follow_up" and not self.assistant_message_id:
            raise ValueError("a follow-up event names its assistant_message_id")
        return self


class SuggestionsClient(ServiceClient):
    """The suggestions service's internal API; every call names the caller."""

    async def get(self, who: Principal, session_id: str, message_id: str) -> Any:
        params = _caller(who) | {"assistant_message_id": message_id}
        return await self.call("GET", f"/internal/sessions/{session_id}/suggestions", params=params)

    async def regenerate(self, who: Principal, session_id: str, message_id: str) -> Any:
        body = _caller(who) | {"assistant_message_id": message_id}
        path = f"/internal/sessions/{session_id}/suggestions"
        return await self.call("POST", path, json=body, resend=False)

    async def event(
        self, who: Principal, session_id: str, body: SuggestionEventBody, agent_id: str
    ) -> Any:
        path = f"/internal/sessions/{session_id}/suggestion-events"
        payload = _caller(who) | body.model_dump()
        if body.placement == "starter":
            payload["assistant_message_id"] = f"agent:{agent_id}"
        return await self.call("POST", path, json=payload, resend=False)

    async def starters(
        self, who: Principal, session_id: str, agent_id: str, locale: str | None
    ) -> Any:
        params = _caller(who) | {"agent_id": agent_id}
        if locale is not None:
            params["locale"] = locale
        return await self.call("GET", f"/internal/sessions/{session_id}/starters", params=params)


def _caller(who: Principal) -> dict[str, Any]:
    return {"tenant_id": who.tenant_id, "user_id": who.user_id}


def suggestions_router(
    client: SuggestionsClient, directory: SessionDirectory, auth: ApiKeyAuth
) -> APIRouter:
    """``/api/v1/sessions/{id}/suggestions``, ``.../suggestion-events``, ``.../starters``."""
    router = APIRouter(prefix="/api/v1/sessions/{session_id}", tags=["suggestions"])
    Who = Annotated[Principal, Depends(auth)]

    @router.get("/suggestions")
    async def get_suggestions(who: Who, session_id: Id, assistant_message_id: MessageId) -> Any:
        """The follow-ups of an assistant message: ``pending``/``generating`` until
        ``suggestions_ready`` reached the stream, then ``ready`` with the questions,
        ``suppressed`` or ``failed`` with the reason; ``disabled`` when the agent has
        follow-ups off."""
        await directory.lookup(who.tenant_id, session_id, user_id=who.user_id)
        return await client.get(who, session_id, assistant_message_id)

    @router.post("/suggestions")
    async def regenerate(who: Who, session_id: Id, body: RegenerateBody) -> Any:
        """New follow-ups for a message (403 unless the agent allows it, 409 while its
        set is generating); answers the new set and announces it on the stream."""
        await directory.lookup(who.tenant_id, session_id, user_id=who.user_id)
        return await client.regenerate(who, session_id, body.assistant_message_id)

    @router.post("/suggestion-events", status_code=201)
    async def record_event(who: Who, session_id: Id, body: SuggestionEventBody) -> Any:
        """An impression, click, dismiss or regenerate of a follow-up or starter; a
        click is attributed to the next user message of the session."""
        session = await directory.lookup(who.tenant_id, session_id, user_id=who.user_id)
        return await client.event(who, session_id, body, session.agent_id or QUICK_ANSWER_AGENT)

    @router.get("/starters")
    async def starters(
        who: Who,
        session_id: Id,
        locale: Locale | None = Query(
            default=None, description="The user's language (BCP 47); else Accept-Language."
        ),
        accept_language: str | None = Header(default=None),
    ) -> Any:
        """The starter questions of the session's agent (SPEC Q-01), for an empty session,
        in the user's language."""
        session = await directory.lookup(who.tenant_id, session_id, user_id=who.user_id)
        agent_id = session.agent_id or QUICK_ANSWER_AGENT
        chosen = locale or preferred_locale(accept_language)
        return await client.starters(who, session_id, agent_id, chosen)

    return router
