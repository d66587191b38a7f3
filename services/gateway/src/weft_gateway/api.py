"""The public API (``/api/v1``): sessions and agent chat over SSE."""

import json
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, HTTPException, Query
from pydantic import BaseModel, Field
from sse_starlette import EventSourceResponse, ServerSentEvent
from ulid import ULID
from weft_contracts import ChatRequested, ChatRequestedData, Topic
from weft_platform.bus import EventBus

from weft_gateway.auth import ApiKeyAuth, Principal
from weft_gateway.clients import AgentConfigClient, MemoryClient
from weft_gateway.settings import GatewaySettings
from weft_gateway.streams import SessionStreams, StreamEntry

AGENT_REQUIRED = "agent_id is required when agent mode is enabled"


class SessionCreate(BaseModel):
    """Body of ``POST /sessions``."""

    title: str = Field(default="", max_length=500)
    agent_id: str | None = Field(default=None, max_length=64)


class ChatBody(BaseModel):
    """Body of the chat routes."""

    query: str = Field(min_length=1, max_length=100_000)
    agent_id: str | None = Field(default=None, max_length=64)
    knowledge_base_ids: list[str] | None = Field(default=None, max_length=10)


class Gateway:
    """Route handlers and what they need, built once by the app factory."""

    def __init__(
        self,
        *,
        settings: GatewaySettings,
        bus: EventBus,
        streams: SessionStreams,
        memory: MemoryClient,
        agents: AgentConfigClient,
    ):
        self.settings = settings
        self.bus = bus
        self.streams = streams
        self.memory = memory
        self.agents = agents

    async def start_turn(
        self, who: Principal, session_id: str, body: ChatBody
    ) -> EventSourceResponse:
        """Publish ``ChatRequested`` and stream that turn's events (SPEC C-01, C-02, C-05)."""
        session = await self.memory.get_session(who.tenant_id, session_id)
        agent_id = body.agent_id or session.get("agent_id")
        if not agent_id:
            raise HTTPException(400, AGENT_REQUIRED)
        kb_ids = self._allowed_kbs(who, body.knowledge_base_ids)
        agent = await self.agents.resolve(who.tenant_id, agent_id, kb_ids)
        request = ChatRequested(
            tenant_id=who.tenant_id,
            session_id=session_id,
            request_id=f"req_{ULID()}",
            data=ChatRequestedData(query=body.query, user_id=who.user_id, agent=agent),
        )
        position = await self.streams.last_position(who.tenant_id, session_id)
        await self.bus.publish(Topic.AGENT_REQUESTS, request)
        events = self._sse(who.tenant_id, session_id, position, request.request_id)
        return EventSourceResponse(
            events, ping=self.settings.sse_ping_s, headers={"X-Request-Id": request.request_id}
        )

    async def resume(
        self, who: Principal, session_id: str, last_event_id: str | None
    ) -> EventSourceResponse:
        """Rejoin the newest turn: after ``Last-Event-ID``, or from the turn's start."""
        await self.memory.get_session(who.tenant_id, session_id)
        start = last_event_id or await self.streams.latest_turn_start(who.tenant_id, session_id)
        if start is None or not await self.streams.exists(who.tenant_id, session_id):
            retention = self.settings.stream_retention_s
            raise HTTPException(404, f"no turn of this session within the last {retention}s")
        return EventSourceResponse(
            self._sse(who.tenant_id, session_id, start, None), ping=self.settings.sse_ping_s
        )

    def _allowed_kbs(self, who: Principal, requested: list[str] | None) -> list[str] | None:
        if who.knowledge_base_ids is None:
            return requested
        if requested is None:
            return who.knowledge_base_ids
        denied = sorted(set(requested) - set(who.knowledge_base_ids))
        if denied:
            raise HTTPException(403, f"this API key may not use knowledge bases: {denied}")
        return requested

    async def _sse(
        self, tenant_id: str, session_id: str, after: str, request_id: str | None
    ) -> AsyncIterator[ServerSentEvent]:
        async for entry in self.streams.follow(
            tenant_id,
            session_id,
            after,
            request_id=request_id,
            idle_timeout_s=self.settings.turn_idle_timeout_s,
        ):
            if entry is None:
                yield _idle_error(self.settings.turn_idle_timeout_s)
                return
            yield _to_sse(entry)


def _to_sse(entry: StreamEntry) -> ServerSentEvent:
    return ServerSentEvent(data=entry.event_json, event=entry.type, id=entry.entry_id)


def _idle_error(timeout_s: float) -> ServerSentEvent:
    payload = {"code": "stream_idle_timeout", "message": f"no event for {timeout_s:.0f}s"}
    return ServerSentEvent(data=json.dumps(payload), event="error")


def public_router(gw: Gateway, auth: ApiKeyAuth) -> APIRouter:
    """Routes under ``/api/v1``; every one requires an API key."""
    router = APIRouter(prefix="/api/v1")
    Who = Annotated[Principal, Depends(auth)]

    @router.post("/sessions", status_code=201, tags=["sessions"])
    async def create_session(who: Who, body: SessionCreate) -> Any:
        return await gw.memory.create_session(who.tenant_id, who.user_id, body.title, body.agent_id)

    @router.get("/sessions/{session_id}", tags=["sessions"])
    async def get_session(who: Who, session_id: str) -> Any:
        return await gw.memory.get_session(who.tenant_id, session_id)

    @router.get("/sessions/{session_id}/messages", tags=["sessions"])
    async def list_messages(
        who: Who, session_id: str, limit: int = Query(default=50, ge=1, le=200)
    ) -> Any:
        return await gw.memory.list_messages(who.tenant_id, session_id, limit)

    @router.post("/agent-chat/{session_id}", tags=["chat"], response_class=EventSourceResponse)
    async def agent_chat(who: Who, session_id: str, body: ChatBody) -> EventSourceResponse:
        return await gw.start_turn(who, session_id, body)

    @router.get("/sessions/{session_id}/stream", tags=["chat"], response_class=EventSourceResponse)
    async def stream(
        who: Who,
        session_id: str,
        last_event_id: Annotated[str | None, Header(pattern=r"^\d+-\d+$")] = None,
    ) -> EventSourceResponse:
        return await gw.resume(who, session_id, last_event_id)

    return router
