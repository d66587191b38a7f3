"""MessageRecorder: turns agent events into user/assistant rows, idempotently.

Rows have a natural key (request_id, role), so a re-delivered event rewrites the same
row with the same values (invariant 3). A turn whose ``complete`` never arrives keeps its
assistant row at ``is_completed = false`` and is left out of history.

When the user stops a turn, ``complete`` comes with status ``cancelled`` and an empty
``final_answer``; what was already streamed is rebuilt from the ``final_answer`` deltas
kept in Redis (one hash per turn, field = event seq, so re-delivery is harmless) and
stored marked ``is_partial`` (as the reference does).

Once ``complete`` is stored, the turn's end is signalled in Redis for the history request
of the session's next turn, which may already be waiting for it (``turn_ends``).

Usage (``weft_storage.usage``): ``turn_started`` opens the turn's usage row with its user
and agent, ``complete`` writes the turn's totals into it, both in the transaction of the
message rows and idempotent on the turn's request id.

Long-term memory (SPEC M-10): ``turn_started`` of an agent with memory on opens an
extraction row, ``complete`` marks it pending (or skipped) in the same transaction as the
assistant row, and ``on_extraction_due`` wakes the extraction worker; the model call
itself never runs on the consume path.

Approvals (SPEC H-02, ``weft_memory.prompts``): ``tool_approval_required`` records the
prompt and its timer, ``tool_approval_resolved`` settles it, and ``complete`` cancels the
turn's prompts still waiting and drops its suspended state, in the transaction of the
assistant row.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from redis.asyncio import Redis
from sqlalchemy import select, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from weft_contracts import (
    CompleteEvent,
    FinalAnswerEvent,
    ImagesDescribedEvent,
    ReferencesEvent,
    ToolApprovalRequiredEvent,
    ToolApprovalResolvedEvent,
    TurnStartedEvent,
    TurnStatus,
    assistant_message_id,
)
from weft_storage.memory.models import ChatSession, Message
from weft_storage.memory.usage import TurnTotals, open_turn, record_turn

from weft_memory import prompts
from weft_memory.extraction_queue import expect_extraction, turn_ended
from weft_memory.turn_ends import signal_turn_end

PARTIAL_TTL_S = 24 * 3600
RECORDED_EVENTS = (
    TurnStartedEvent,
    FinalAnswerEvent,
    ReferencesEvent,
    ImagesDescribedEvent,
    CompleteEvent,
    ToolApprovalRequiredEvent,
    ToolApprovalResolvedEvent,
)
"""The events :meth:`MessageRecorder.handle` stores."""
RECORDED_TYPES = frozenset(cls.model_fields["type"].default for cls in RECORDED_EVENTS)
"""Their type names: thought deltas and tool events (most of the stream) are skipped by
their header without being decoded."""


def partial_key(request_id: str) -> str:
    """Redis hash of the answer deltas streamed so far in one turn."""
    return f"weft:memory:answer:{request_id}"


class MessageRecorder:
    """Persists what memory needs of the event stream."""

    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        redis: Redis | None = None,
        on_extraction_due: Callable[[], None] | None = None,
        deployment: str = "",
    ):
        """``deployment``: the topic prefix, stamped on the prompts recorded (their timer
        is this deployment's)."""
        self._deployment = deployment
        self._sessions = sessions
        self._redis = redis
        self._on_extraction_due = on_extraction_due

    async def handle(self, event: Any) -> None:
        """Dispatch one agent event; events memory does not store are ignored."""
        match event:
            case TurnStartedEvent():
                await self._turn_started(event)
            case FinalAnswerEvent():
                await self._answer_delta(event)
            case ReferencesEvent():
                await self._references(event)
            case ImagesDescribedEvent():
                await self._images_described(event)
            case CompleteEvent():
                await self._complete(event)
            case ToolApprovalRequiredEvent():
                async with self._sessions.begin() as s:
                    await prompts.record_required(s, event, self._deployment)
            case ToolApprovalResolvedEvent():
                async with self._sessions.begin() as s:
                    await prompts.record_resolved(s, event)
            case _:
                pass

    async def _turn_started(self, event: TurnStartedEvent) -> None:
        async with self._sessions.begin() as s:
            await _ensure_session(s, event.tenant_id, event.session_id, event.data.user_id)
            base = {
                "tenant_id": event.tenant_id,
                "session_id": event.session_id,
                "request_id": event.request_id,
            }
            user = {
                **base,
                "id": event.id,
                "role": "user",
                "content": event.data.query,
                "images": [{"url": url, "description": None} for url in event.data.images],
                "is_completed": True,
                "status": "completed",
                "created_at": event.time,
            }
            # The assistant row sorts right after its user row, even at equal timestamps.
            assistant = {
                **base,
                "id": assistant_message_id(event.id),
                "role": "assistant",
                "content": "",
                "status": "running",
                "created_at": event.time + timedelta(microseconds=1),
            }
            for row in (user, assistant):
                await s.execute(insert(Message).values(**row).on_conflict_do_nothing())
            await open_turn(
                s, tenant_id=event.tenant_id, request_id=event.request_id,
                user_id=event.data.user_id, agent_id=event.data.agent_id, at=event.time,
            )  # fmt: skip
            if event.data.memory_enabled:
                await expect_extraction(
                    s, request_id=event.request_id, tenant_id=event.tenant_id,
                    user_id=event.data.user_id, session_id=event.session_id,
                )  # fmt: skip
            await s.execute(
                update(ChatSession)
                .where(ChatSession.id == event.session_id)
                .values(updated_at=datetime.now(UTC))
            )

    async def _images_described(self, event: ImagesDescribedEvent) -> None:
        """SPEC E-26: keep what a model without vision read, so history replays it."""
        async with self._sessions.begin() as s:
            row = await s.scalar(
                select(Message)
                .where(Message.request_id == event.request_id, Message.role == "user")
                .with_for_update()
            )
            if row is None or not row.images:
                return
            texts = event.data.descriptions
            row.images = [
                {**image, "description": texts[i] if i < len(texts) else None}
                for i, image in enumerate(row.images)
            ]

    async def _answer_delta(self, event: FinalAnswerEvent) -> None:
        if self._redis is None:
            return
        key = partial_key(event.request_id)
        if event.data.superseded:  # SPEC E-13: a steer made what streamed so far a step
            await self._redis.delete(key)
            return
        if not event.data.delta:
            return
        value = json.dumps({"round": event.data.round, "delta": event.data.delta})
        await self._redis.hset(key, str(event.seq), value)
        await self._redis.expire(key, PARTIAL_TTL_S)

    async def _partial_answer(self, request_id: str) -> str:
        """The answer streamed in the last round before the stop, in seq order."""
        if self._redis is None:
            return ""
        raw = await self._redis.hgetall(partial_key(request_id))
        pieces = sorted((int(seq), json.loads(v)) for seq, v in raw.items())
        if not pieces:
            return ""
        last_round = max(p["round"] for _, p in pieces)
        return "".join(p["delta"] for _, p in pieces if p["round"] == last_round)

    async def _references(self, event: ReferencesEvent) -> None:
        async with self._sessions.begin() as s:
            row = await _assistant_row(s, event.request_id)
            if row is None:
                return
            known = {r.get("chunk_id") for r in row.references}
            new = [r.model_dump() for r in event.data.references if r.chunk_id not in known]
            if new:
                row.references = [*row.references, *new]

    async def _complete(self, event: CompleteEvent) -> None:
        values = await self._completion_values(event)
        async with self._sessions.begin() as s:
            await _ensure_session(s, event.tenant_id, event.session_id, "unknown")
            stmt = insert(Message).values(
                id=event.id,
                tenant_id=event.tenant_id,
                session_id=event.session_id,
                request_id=event.request_id,
                role="assistant",
                created_at=event.time,
                **values,
            )
            await s.execute(
                stmt.on_conflict_do_update(constraint="uq_messages_request_role", set_=values)
            )
            due = await turn_ended(s, event.request_id, completed=bool(values["is_completed"]))
            totals = TurnTotals.model_validate(event.data.usage.model_dump())
            await record_turn(
                s, tenant_id=event.tenant_id, request_id=event.request_id, totals=totals,
                at=event.time,
            )  # fmt: skip
            await prompts.turn_ended(s, event.tenant_id, event.request_id)
        if due and self._on_extraction_due is not None:
            self._on_extraction_due()
        if self._redis is not None:
            await self._redis.delete(partial_key(event.request_id))
            await signal_turn_end(self._redis, event.request_id)

    async def _completion_values(self, event: CompleteEvent) -> dict[str, Any]:
        data = event.data
        content, partial = data.final_answer, False
        if data.status == TurnStatus.CANCELLED and not content:
            content = await self._partial_answer(event.request_id)
            partial = bool(content)
            if not partial:
                # A re-delivered ``complete``: the deltas are gone, keep what was stored.
                content = await self._stored_partial(event.request_id)
                partial = bool(content)
        return {
            "content": content,
            "agent_steps": [step.model_dump() for step in data.steps],
            "is_completed": data.status == TurnStatus.COMPLETED,
            "is_fallback": data.is_fallback,
            "is_partial": partial,
            "status": data.status.value,
            "duration_ms": data.duration_ms,
        }

    async def _stored_partial(self, request_id: str) -> str:
        async with self._sessions() as s:
            row = await s.scalar(
                select(Message).where(
                    Message.request_id == request_id,
                    Message.role == "assistant",
                    Message.is_partial.is_(True),
                )
            )
        return row.content if row is not None else ""


async def _ensure_session(s: AsyncSession, tenant_id: str, session_id: str, user_id: str) -> None:
    """Sessions are normally created through the API; events for an unknown one still land."""
    stmt = insert(ChatSession).values(id=session_id, tenant_id=tenant_id, user_id=user_id)
    await s.execute(stmt.on_conflict_do_nothing())


async def _assistant_row(s: AsyncSession, request_id: str) -> Message | None:
    stmt = select(Message).where(Message.request_id == request_id, Message.role == "assistant")
    return await s.scalar(stmt.with_for_update())
