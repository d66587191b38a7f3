"""Turns over SSE: start (SPEC C-01..C-03), rejoin, stop and steer a session's turn."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any, Literal

import structlog
from fastapi import HTTPException
from pydantic import BaseModel, Field
from redis.asyncio import Redis
from redis.exceptions import RedisError
from ulid import ULID
from weft_contracts import (
    AgentConfig,
    AgentMode,
    CancelRequested,
    CancelRequestedData,
    ChatRequested,
    ChatRequestedData,
    ErrorCode,
    Locale,
    ReasoningEffort,
    SteerMessage,
    SteerMessageData,
    Topic,
    TurnBudget,
    preferred_locale,
)
from weft_platform.bus import EventBus
from weft_platform.credentials import TURN_AUDIENCE, CredentialSigner

from weft_gateway.access_cap import AccessCap
from weft_gateway.approvals_client import ApprovalsClient
from weft_gateway.auth import Principal
from weft_gateway.budget_gate import BudgetGate
from weft_gateway.clients import AgentConfigClient, SessionsClient
from weft_gateway.fanout import End, Follow, Outcome, Sink, StreamFanout
from weft_gateway.images import check_images, require_image_upload
from weft_gateway.knowledge_scope import KnowledgeScope
from weft_gateway.limits import TenantLimits
from weft_gateway.mentions import MAX_MENTIONS, Mention, MentionResolver, inline_mentions
from weft_gateway.pending_prompts import missing_from_stream, pending_prompts, prompt_frames
from weft_gateway.question_origin import QuestionOrigins, SuggestionPick
from weft_gateway.session_cache import SessionDirectory
from weft_gateway.settings import GatewaySettings
from weft_gateway.sse import StreamFormat, synthetic_failure
from weft_gateway.sse_response import EventStreamResponse
from weft_gateway.sse_slots import StreamSlot, StreamSlots
from weft_gateway.streams import SessionStreams, active_turn_key

AGENT_REQUIRED = "agent_id is required when agent mode is enabled"
QUICK_ANSWER_AGENT = "builtin-quick-answer"

log = structlog.get_logger(__name__)


class ChatBody(BaseModel):
    """Body of the chat routes."""

    query: str = Field(min_length=1, max_length=100_000)
    agent_id: str | None = Field(default=None, max_length=64)
    agent_enabled: bool = Field(default=True, description="Only read by /agent-chat (C-02).")
    knowledge_base_ids: list[str] | None = Field(default=None, max_length=10)
    double_texting: Literal["reject", "enqueue", "interrupt"] = Field(
        default="enqueue",
        description="What to do when the session already runs a turn: reject answers 409, "
        "enqueue runs this turn after it, interrupt stops it first.",
    )
    reasoning_effort: ReasoningEffort | None = Field(
        default=None,
        description="Overrides the agent's reasoning effort for this turn (SPEC A-05); "
        "lowered to a level the model has.",
    )
    summary_model_id: str | None = Field(
        default=None,
        max_length=200,
        description="Answering model for this turn; ignored for shared agents (SPEC A-10).",
    )
    images: list[str] = Field(
        default_factory=list,
        description="Images of the message (SPEC E-26): https:// URLs or "
        "data:image/png|jpeg|gif|webp;base64 URIs; the agent must have image upload on.",
    )
    suggestion: SuggestionPick | None = Field(
        default=None,
        description="The suggested question this message was sent by clicking (SPEC Q-03): "
        "a knowledge suggestion's source is retrieved and given to the model first.",
    )
    locale: Locale | None = Field(
        default=None,
        description="The user's language (BCP 47, e.g. fr-CA): follow-up suggestions are "
        "made in it. Without it, the request's Accept-Language; without that, the "
        "deployment's default.",
    )
    mentions: list[Mention] = Field(
        default_factory=list,
        max_length=MAX_MENTIONS,
        description="SPEC A-11: documents (@doc) and tags (@tag) the search of this turn is "
        "narrowed to, as a client's @ menu sends them; @doc:<id> and @tag:<tag> in the "
        "query count too.",
    )


class SteerBody(BaseModel):
    """Body of ``POST /sessions/{id}/steer`` (SPEC E-13)."""

    content: str = Field(min_length=1, max_length=100_000)


class ControlAccepted(BaseModel):
    """Answer of stop and steer: the command is on the control topic."""

    request_id: str
    status: Literal["cancel_requested", "steer_sent"]


def chat_mode(agent: AgentConfig) -> Literal["agent", "normal"]:
    """SPEC C-02: the agent's own mode wins; only smart-reasoning runs the agent loop, so a
    quick-answer agent on /agent-chat is downgraded to normal mode."""
    return "agent" if agent.mode == AgentMode.SMART_REASONING else "normal"


def embedded_channel_mode(agent_mode_on: bool, channel_agent_id: str) -> Literal["agent", "normal"]:
    """SPEC C-03: an embedded channel uses agent mode only when agent mode is on and its
    agent is not the built-in quick-answer agent."""
    return "agent" if agent_mode_on and channel_agent_id != QUICK_ANSWER_AGENT else "normal"


def pick_agent_id(agent_enabled: bool, requested: str | None, session_agent: str | None) -> str:
    """The agent of a turn: the request's, else the session's; agent mode without one is
    the exact 400 of SPEC C-02; normal mode without one uses the quick-answer agent."""
    agent_id = requested or session_agent
    if agent_id:
        return agent_id
    if agent_enabled:
        raise HTTPException(400, AGENT_REQUIRED)
    return QUICK_ANSWER_AGENT


@dataclass(kw_only=True)
class Gateway:
    """Route handlers' state, built once by the app factory."""

    settings: GatewaySettings
    bus: EventBus
    redis: Redis
    streams: SessionStreams
    fanout: StreamFanout
    memory: SessionsClient
    directory: SessionDirectory
    agents: AgentConfigClient
    limits: TenantLimits
    knowledge: KnowledgeScope
    signer: CredentialSigner | None = None
    """Signs the request credential of each turn and command (records carry it)."""
    budget: BudgetGate | None = None
    """Refuses a turn of a tenant over its token budget (429)."""
    slots: StreamSlots | None = None
    """Caps a tenant's open SSE streams across replicas (429)."""
    origins: QuestionOrigins | None = None
    """Resolves a clicked suggested question and its source (SPEC Q-03)."""
    access_cap: AccessCap | None = None
    """Caps each turn's access level at the tenant's maximum (SPEC H-01)."""
    prompts: ApprovalsClient | None = None
    """Memory's prompts: a stream that lost a pending prompt shows it again (H-02)."""
    mentions: MentionResolver | None = None
    """Narrows a turn's search to its @doc/@tag mentions (SPEC A-11)."""

    def turn_deadline(self) -> datetime:
        """When a turn requested now must have ended (SPEC E-20)."""
        return datetime.now(UTC) + timedelta(seconds=self.settings.turn_deadline_s)

    def turn_credential(
        self, who: Principal, session_id: str, request_id: str, deadline: datetime | None = None
    ) -> str | None:
        """The credential of a turn's records and of the internal calls made for it: this
        tenant, user, session and turn. It expires at the turn's ``deadline`` (default: a
        turn requested now), so the copy every subscriber of ``agent.events`` reads off the
        records opens nothing once the turn is over."""
        if self.signer is None:
            return None
        ttl_s = ((deadline or self.turn_deadline()) - datetime.now(UTC)).total_seconds()
        return self.signer.request(
            tenant_id=who.tenant_id,
            user_id=who.user_id,
            session_id=session_id,
            request_id=request_id,
            knowledge_base_ids=who.knowledge_base_ids,
            audience=TURN_AUDIENCE,
            ttl_s=max(ttl_s, 1.0),
        )

    async def start_turn(
        self,
        who: Principal,
        session_id: str,
        body: ChatBody,
        *,
        agent_enabled: bool,
        fmt: StreamFormat = "native",
        accept_language: str | None = None,
    ) -> EventStreamResponse:
        """Publish ``ChatRequested`` and stream that turn's events (SPEC C-01, C-02, C-05)."""
        images = check_images(body.images, self.settings)
        budget = None
        if self.budget is not None:
            limits = await self.budget.admit(who.tenant_id)
            budget = TurnBudget(
                tokens_per_minute=limits.tokens_per_minute, tokens_per_day=limits.tokens_per_day
            )
        session = await self.directory.lookup(who.tenant_id, session_id, user_id=who.user_id)
        agent_id = pick_agent_id(agent_enabled, body.agent_id, session.agent_id)
        # The request's own KB ids are the knowledge routes' business: one outside the
        # key's list is 404 like a missing one. An agent's KBs are agent-config's.
        await self.knowledge.require_all(who, body.knowledge_base_ids or [])
        agent = await self.agents.resolve(
            who.tenant_id,
            agent_id,
            body.knowledge_base_ids,
            who.knowledge_base_ids,
            reasoning_effort=body.reasoning_effort,
            summary_model_id=body.summary_model_id,
        )
        require_image_upload(agent, images)
        mentioned = [*body.mentions, *inline_mentions(body.query)]
        if mentioned and self.mentions is not None:
            agent = await self.mentions.narrow(who.tenant_id, agent, mentioned)
        if self.access_cap is not None:
            agent = await self.access_cap.apply(who.tenant_id, agent)
        locale = body.locale or preferred_locale(accept_language)
        origin = None
        if body.suggestion is not None and self.origins is not None:
            origin = await self.origins.resolve(who, session_id, body.suggestion, agent_id, locale)
        if body.double_texting == "reject":
            await self._reject_if_running(who.tenant_id, session_id)
        request_id = f"req_{ULID()}"
        structlog.contextvars.bind_contextvars(request_id=request_id)  # the turn's, in logs
        deadline = self.turn_deadline()
        request = ChatRequested(
            tenant_id=who.tenant_id,
            session_id=session_id,
            request_id=request_id,
            credential=self.turn_credential(who, session_id, request_id, deadline),
            data=ChatRequestedData(
                query=body.query,
                user_id=who.user_id,
                agent=agent,
                mode=chat_mode(agent),
                double_texting=body.double_texting,
                images=images,
                question_origin=origin,
                mentions=[f"{m.type}:{m.value}" for m in mentioned],
                locale=locale,
                deadline=deadline,
                budget=budget,
            ),
        )
        slot = await self._stream_slot(who.tenant_id)
        try:
            position = await self._publish(request)
        except BaseException:
            await self._release(slot)
            raise
        return self._response(
            who.tenant_id,
            session_id,
            position,
            request.request_id,
            fmt,
            {"X-Request-Id": request.request_id},
            slot,
        )

    async def _publish(self, request: ChatRequested) -> str:
        """Take a running-turn slot and publish the turn; the stream position it starts
        after."""
        tenant_id = request.tenant_id
        await self.limits.admit_turn(tenant_id, request.request_id)
        position = await self.streams.last_position(tenant_id, request.session_id)
        try:
            await self.bus.publish(Topic.AGENT_REQUESTS, request)
        except Exception:
            await self.limits.release_turn(tenant_id, request.request_id)
            raise
        return position

    async def resume(
        self,
        who: Principal,
        session_id: str,
        last_event_id: str | None,
        fmt: StreamFormat = "native",
    ) -> EventStreamResponse:
        """Rejoin the newest turn: after ``Last-Event-ID``, or from the turn's start.

        The stream key contains the tenant but not the user: the session directory's
        owner check (a Redis read on a hit) keeps another user of the tenant out."""
        await self.directory.lookup(who.tenant_id, session_id, user_id=who.user_id)
        start = last_event_id or await self.streams.latest_turn_start(who.tenant_id, session_id)
        pending = await self._pending_prompts(who, session_id)
        lost = await missing_from_stream(self.redis, who.tenant_id, session_id, pending)
        turn = None
        if start is None or not await self.streams.exists(who.tenant_id, session_id):
            if not lost:
                retention = self.settings.stream_retention_s
                raise HTTPException(
                    404,
                    f"no turn of this session within the stream retention ({retention}s): "
                    "nothing to replay; load the stored messages instead",
                )
            # The stream is gone but a turn waits for a person: show its prompts and
            # follow that turn from whatever the projector writes next.
            start, turn = start or "0-0", str(lost[-1]["request_id"])
        preface = prompt_frames(who.tenant_id, lost, fmt)
        slot = await self._stream_slot(who.tenant_id)
        asking = frozenset(str(p["prompt_id"]) for p in pending)
        return self._response(
            who.tenant_id, session_id, start, turn, fmt, {}, slot, preface, asking
        )

    async def _pending_prompts(self, who: Principal, session_id: str) -> list[dict[str, Any]]:
        """The session's prompts waiting for a person (memory's list; none without it)."""
        if self.prompts is None:
            return []
        timeout = self.settings.session_lookup_timeout_s
        return await pending_prompts(self.prompts, who, session_id, timeout)

    async def stop(self, who: Principal, session_id: str) -> ControlAccepted:
        """Publish ``CancelRequested`` for the running turn (any engine replica acts on it)."""
        request_id = await self._running_turn(who, session_id)
        await self.bus.publish(
            Topic.AGENT_CONTROL,
            CancelRequested(
                tenant_id=who.tenant_id,
                session_id=session_id,
                request_id=request_id,
                credential=self.turn_credential(who, session_id, request_id),
                data=CancelRequestedData(),
            ),
        )
        return ControlAccepted(request_id=request_id, status="cancel_requested")

    async def steer(self, who: Principal, session_id: str, body: SteerBody) -> ControlAccepted:
        """Publish ``SteerMessage``: the engine injects it before its next LLM call (E-13)."""
        request_id = await self._running_turn(who, session_id)
        await self.bus.publish(
            Topic.AGENT_CONTROL,
            SteerMessage(
                tenant_id=who.tenant_id,
                session_id=session_id,
                request_id=request_id,
                credential=self.turn_credential(who, session_id, request_id),
                data=SteerMessageData(content=body.content),
            ),
        )
        return ControlAccepted(request_id=request_id, status="steer_sent")

    async def _running_turn(self, who: Principal, session_id: str) -> str:
        await self.directory.lookup(who.tenant_id, session_id, user_id=who.user_id)
        active: Any = await self.redis.get(active_turn_key(who.tenant_id, session_id))
        if not active:
            raise HTTPException(409, "this session has no running turn")
        return active.decode() if isinstance(active, bytes) else str(active)

    async def _reject_if_running(self, tenant_id: str, session_id: str) -> None:
        active: Any = await self.redis.get(active_turn_key(tenant_id, session_id))
        if active:
            running = active.decode() if isinstance(active, bytes) else str(active)
            raise HTTPException(
                409,
                f"session is running turn {running}; double_texting=reject refuses a new "
                "message until it completes (use enqueue or interrupt, or stop it first)",
            )

    def _response(
        self,
        tenant_id: str,
        session_id: str,
        after: str,
        request_id: str | None,
        fmt: StreamFormat,
        headers: dict[str, str],
        slot: StreamSlot | None = None,
        preface: bytes = b"",
        asking: frozenset[str] = frozenset(),
    ) -> EventStreamResponse:
        follow = Follow(
            asking=asking,
            tenant_id=tenant_id,
            session_id=session_id,
            after=after,
            request_id=request_id,
            fmt=fmt,
            idle_timeout_s=self.settings.turn_idle_timeout_s,
            heartbeat_s=self.settings.sse_ping_s,
        )
        return EventStreamResponse(
            lambda sink: self._stream(follow, sink, preface),
            send_timeout_s=self.settings.sse_send_timeout_s,
            buffer_bytes=self.settings.sse_buffer_bytes,
            headers=headers,
            on_close=partial(self._release, slot) if slot is not None else None,
        )

    async def _stream_slot(self, tenant_id: str) -> StreamSlot | None:
        return await self.slots.acquire(tenant_id) if self.slots is not None else None

    async def _release(self, slot: StreamSlot | None) -> None:
        if self.slots is not None:
            await self.slots.release(slot)

    async def _follow(self, follow: Follow, sink: Sink) -> Outcome:
        """The fan-out of ``follow``; a stream store that does not answer when the client
        joins (Redis restarting) is waited for up to ``stream_store_wait_s``: the client
        then gets its events instead of an end it would take for the turn's."""
        deadline = time.monotonic() + self.settings.stream_store_wait_s
        while True:
            try:
                return await self.fanout.stream(follow, sink)
            except RedisError:  # raised before anything was written: a retry is clean
                if time.monotonic() >= deadline:
                    return Outcome(End.UNAVAILABLE, follow.after, follow.request_id)
                log.warning("stream_store_waited", session_id=follow.session_id)
                await asyncio.sleep(0.5)

    async def _stream(self, follow: Follow, sink: Sink, preface: bytes = b"") -> bytes:
        """Write one client's frames (``preface`` first, then the shared per-event frames
        and heartbeats, by the fan-out) to ``sink``; returns the synthetic ``error`` +
        ``complete`` when the gateway itself must end the stream, else nothing."""
        if preface:
            sink.write(preface)
        outcome = await self._follow(follow, sink)
        if outcome.end is End.IDLE:
            timeout = follow.idle_timeout_s
            code, message = ErrorCode.STREAM_IDLE_TIMEOUT, f"no event for {timeout:.0f}s"
        elif outcome.end is End.UNAVAILABLE:
            code = ErrorCode.STREAM_UNAVAILABLE
            message = "the event stream store is unavailable; retry"
        else:
            return b""  # complete, or a client that resumes with Last-Event-ID
        events = synthetic_failure(
            tenant_id=follow.tenant_id,
            session_id=follow.session_id,
            request_id=outcome.request_id or "unknown",
            position=outcome.position,
            code=code,
            message=message,
            fmt=follow.fmt,
        )
        return b"".join(event.encode() for event in events)
