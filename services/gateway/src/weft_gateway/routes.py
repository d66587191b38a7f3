"""The public API (``/api/v1``) except knowledge bases: sessions, messages, chat over SSE,
stop and steer, and agents (proxied to agent-config). Every route needs an API key and is
scoped to its tenant; a resource of another tenant is 404, never visible (invariant 5).
A session belongs to its user: every route by session id is 404 for another user of the
same tenant, checked by memory (which filters by tenant and user) and, for chat, stream,
stop and steer, by the session directory's owner check."""

# No ``from __future__ import annotations``: FastAPI must see the route annotations
# (local aliases such as ``Who``) as objects, not strings.

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Depends, Header, Path, Query, Response
from pydantic import BaseModel, Field

from weft_gateway.api import ChatBody, ControlAccepted, Gateway, SteerBody
from weft_gateway.auth import ApiKeyAuth, Principal
from weft_gateway.clients import ServiceClient
from weft_gateway.knowledge_scope import KnowledgeScope
from weft_gateway.sse_response import EventStreamResponse

FormatQuery = Annotated[
    Literal["native", "weknora"],
    Query(alias="format", description="weknora: the reference system's SSE shape."),
]
Id = Annotated[str, Path(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.:-]+$")]


class SessionCreate(BaseModel):
    """Body of ``POST /sessions``."""

    title: str = Field(default="", max_length=500)
    agent_id: str | None = Field(default=None, max_length=64)


class ShareBody(BaseModel):
    """Body of ``POST /agents/{id}/shares``."""

    organisation_id: str = Field(min_length=1, max_length=64)


class SharedAgentSwitch(BaseModel):
    """Body of ``PUT /shared-agents/{id}``."""

    disabled: bool


class SessionUpdate(BaseModel):
    """Body of ``PATCH /sessions/{id}``: only the fields given change."""

    title: str | None = Field(default=None, max_length=500)
    agent_id: str | None = Field(default=None, max_length=64)


def public_router(gw: Gateway, auth: ApiKeyAuth) -> APIRouter:
    """Sessions and chat routes."""
    router = APIRouter(prefix="/api/v1")
    _session_routes(router, gw, auth)
    _chat_routes(router, gw, auth)
    return router


def _session_routes(router: APIRouter, gw: Gateway, auth: ApiKeyAuth) -> None:
    Who = Annotated[Principal, Depends(auth)]

    @router.post("/sessions", status_code=201, tags=["sessions"])
    async def create_session(who: Who, body: SessionCreate) -> Any:
        if body.agent_id:
            await gw.agents.require_agent(who.tenant_id, body.agent_id)
        session = await gw.memory.create_session(
            who.tenant_id, who.user_id, body.title, body.agent_id
        )
        await gw.directory.remember(session)
        return session

    @router.get("/sessions", tags=["sessions"])
    async def list_sessions(
        who: Who,
        limit: int = Query(default=20, ge=1, le=100),
        offset: int = Query(default=0, ge=0, le=100_000),
        q: str | None = Query(
            default=None,
            min_length=1,
            max_length=200,
            description="Search: only sessions whose title or a message contains this "
            "text (case-insensitive, literal: % and _ are not wildcards).",
        ),
    ) -> Any:
        return await gw.memory.list_sessions(who.tenant_id, who.user_id, limit, offset, q)

    @router.get("/sessions/{session_id}", tags=["sessions"])
    async def get_session(who: Who, session_id: Id) -> Any:
        session = await gw.memory.get_session(who.tenant_id, who.user_id, session_id)
        await gw.directory.remember(session)
        return session

    @router.patch("/sessions/{session_id}", tags=["sessions"])
    async def update_session(who: Who, session_id: Id, body: SessionUpdate) -> Any:
        changes = body.model_dump(exclude_unset=True)
        if body.agent_id:
            await gw.agents.require_agent(who.tenant_id, body.agent_id)
        session = await gw.memory.update_session(who.tenant_id, who.user_id, session_id, changes)
        await gw.directory.updated(session)
        return session

    @router.delete("/sessions/{session_id}", status_code=204, tags=["sessions"])
    async def delete_session(who: Who, session_id: Id) -> Response:
        await gw.memory.delete_session(who.tenant_id, who.user_id, session_id)
        await gw.directory.deleted(who.tenant_id, session_id)
        return Response(status_code=204)

    @router.get("/sessions/{session_id}/messages", tags=["sessions"])
    async def list_messages(
        who: Who,
        session_id: Id,
        limit: int = Query(default=50, ge=1, le=200),
        before: str | None = Query(default=None, max_length=64, description="Message id cursor."),
    ) -> Any:
        return await gw.memory.list_messages(who.tenant_id, who.user_id, session_id, limit, before)

    @router.delete("/sessions/{session_id}/messages", status_code=204, tags=["sessions"])
    async def delete_messages(
        who: Who,
        session_id: Id,
        from_message: str | None = Query(
            default=None, alias="from", max_length=64, pattern=r"^[A-Za-z0-9_.:-]+$",
            description="Rollback: delete this message's turn and every later message.",
        ),
    ) -> Response:  # fmt: skip
        await gw.memory.delete_messages(who.tenant_id, who.user_id, session_id, from_message)
        return Response(status_code=204)

    @router.delete(
        "/sessions/{session_id}/messages/{message_id}", status_code=204, tags=["sessions"]
    )
    async def delete_message(who: Who, session_id: Id, message_id: Id) -> Response:
        """Delete one turn (this message and the other half of its turn)."""
        await gw.memory.delete_message(who.tenant_id, who.user_id, session_id, message_id)
        return Response(status_code=204)


AcceptLanguage = Annotated[
    str | None,
    Header(
        description="Read for the user's language when the body names none; an "
        "unreadable header is ignored, not refused.",
    ),
]


def _chat_routes(router: APIRouter, gw: Gateway, auth: ApiKeyAuth) -> None:
    Who = Annotated[Principal, Depends(auth)]

    @router.post("/agent-chat/{session_id}", tags=["chat"], response_class=EventStreamResponse)
    async def agent_chat(
        who: Who,
        session_id: Id,
        body: ChatBody,
        fmt: FormatQuery = "native",
        accept_language: AcceptLanguage = None,
    ) -> EventStreamResponse:
        return await gw.start_turn(
            who, session_id, body, agent_enabled=body.agent_enabled, fmt=fmt,
            accept_language=accept_language,
        )  # fmt: skip

    @router.post("/knowledge-chat/{session_id}", tags=["chat"], response_class=EventStreamResponse)
    async def knowledge_chat(
        who: Who,
        session_id: Id,
        body: ChatBody,
        fmt: FormatQuery = "native",
        accept_language: AcceptLanguage = None,
    ) -> EventStreamResponse:
        return await gw.start_turn(
            who, session_id, body, agent_enabled=False, fmt=fmt, accept_language=accept_language
        )

    @router.get("/sessions/{session_id}/stream", tags=["chat"], response_class=EventStreamResponse)
    async def stream(
        who: Who,
        session_id: Id,
        last_event_id: Annotated[str | None, Header(pattern=r"^\d{1,20}-\d{1,20}$")] = None,
        fmt: FormatQuery = "native",
    ) -> EventStreamResponse:
        return await gw.resume(who, session_id, last_event_id, fmt)

    @router.post("/sessions/{session_id}/stop", status_code=202, tags=["chat"])
    async def stop(who: Who, session_id: Id) -> ControlAccepted:
        return await gw.stop(who, session_id)

    @router.post("/sessions/{session_id}/steer", status_code=202, tags=["chat"])
    async def steer(who: Who, session_id: Id, body: SteerBody) -> ControlAccepted:
        return await gw.steer(who, session_id, body)


def agents_router(agents: ServiceClient, auth: ApiKeyAuth, knowledge: KnowledgeScope) -> APIRouter:
    """``/api/v1/agents...``: proxied to agent-config with the caller's tenant (A-09)."""
    router = APIRouter(prefix="/api/v1/agents", tags=["agents"])
    Who = Annotated[Principal, Depends(auth)]
    AgentBody = Annotated[dict[str, Any], Body(description="An agent definition (agent-config).")]

    def scope(who: Principal) -> dict[str, str]:
        return {"tenant_id": who.tenant_id, "user_id": who.user_id}

    async def check_kbs(who: Principal, body: dict[str, Any]) -> None:
        # A KB-restricted key may only name its own KBs in an agent it writes: another
        # KB is the 404 of a missing one, as on the knowledge routes. agent-config checks
        # the rest (the ids are the tenant's, their capabilities).
        kb_ids = body.get("knowledge_base_ids")
        if who.knowledge_base_ids is not None and isinstance(kb_ids, list):
            await knowledge.require_all(who, [str(kb) for kb in kb_ids])

    @router.get("/tools")
    async def tool_catalog(who: Who) -> Any:
        return await agents.call("GET", "/internal/agents/tools")

    @router.get("/presets")
    async def type_presets(who: Who) -> Any:
        return await agents.call("GET", "/internal/agents/presets")

    @router.get("/placeholders")
    async def placeholders(who: Who) -> Any:
        return await agents.call("GET", "/internal/agents/placeholders")

    @router.post(
        "/{agent_id}/shares",
        status_code=201,
        tags=["sharing"],
        responses={200: {"description": "Already shared with this organisation (idempotent)."}},
    )
    async def share_agent(who: Who, agent_id: Id, body: ShareBody, response: Response) -> Any:
        """Share with an organisation (SPEC A-10): owner only, editor+; 201 new, 200 again."""
        path = f"/internal/agents/{agent_id}/shares"
        result = await agents.call("POST", path, params=scope(who), json=body.model_dump())
        response.status_code = 201 if result.get("created") else 200
        return result

    @router.get("/{agent_id}/shares", tags=["sharing"])
    async def list_agent_shares(who: Who, agent_id: Id) -> Any:
        return await agents.call("GET", f"/internal/agents/{agent_id}/shares", params=scope(who))

    @router.delete("/{agent_id}/shares/{organisation_id}", status_code=204, tags=["sharing"])
    async def unshare_agent(who: Who, agent_id: Id, organisation_id: Id) -> Response:
        path = f"/internal/agents/{agent_id}/shares/{organisation_id}"
        await agents.call("DELETE", path, params=scope(who))
        return Response(status_code=204)

    @router.get("")
    async def list_agents(who: Who) -> Any:
        return await agents.call("GET", "/internal/agents", params=scope(who))

    @router.post("", status_code=201)
    async def create_agent(who: Who, body: AgentBody) -> Any:
        await check_kbs(who, body)
        return await agents.call("POST", "/internal/agents", params=scope(who), json=body)

    @router.get("/{agent_id}")
    async def get_agent(who: Who, agent_id: Id) -> Any:
        return await agents.call("GET", f"/internal/agents/{agent_id}", params=scope(who))

    @router.put("/{agent_id}")
    async def update_agent(who: Who, agent_id: Id, body: AgentBody) -> Any:
        await check_kbs(who, body)
        path = f"/internal/agents/{agent_id}"
        return await agents.call("PUT", path, params=scope(who), json=body)

    @router.delete("/{agent_id}", status_code=204)
    async def delete_agent(who: Who, agent_id: Id) -> Response:
        await agents.call("DELETE", f"/internal/agents/{agent_id}", params=scope(who))
        return Response(status_code=204)

    @router.post("/{agent_id}/copy", status_code=201)
    async def copy_agent(who: Who, agent_id: Id) -> Any:
        return await agents.call("POST", f"/internal/agents/{agent_id}/copy", params=scope(who))

    return router


def shared_agents_router(agents: ServiceClient, auth: ApiKeyAuth) -> APIRouter:
    """``/api/v1/shared-agents``: agents other tenants shared with the caller (A-10)."""
    router = APIRouter(prefix="/api/v1/shared-agents", tags=["sharing"])
    Who = Annotated[Principal, Depends(auth)]

    @router.get("")
    async def list_shared_agents(who: Who) -> Any:
        """Read-only views (capabilities, never the prompt or creator), disabled ones too."""
        return await agents.call(
            "GET", "/internal/agents/shared", params={"tenant_id": who.tenant_id}
        )

    @router.put("/{agent_id}")
    async def switch_shared_agent(who: Who, agent_id: Id, body: SharedAgentSwitch) -> Any:
        """Disable (or enable again) a shared agent for the caller's tenant."""
        path = f"/internal/agents/shared/{agent_id}"
        return await agents.call(
            "PUT", path, params={"tenant_id": who.tenant_id}, json=body.model_dump()
        )

    return router
