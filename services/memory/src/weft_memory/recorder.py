"""MessageRecorder: turns agent events into user/assistant rows, idempotently.

Rows have a natural key (request_id, role), so a re-delivered event rewrites the same
row with the same values (invariant 3). A turn whose ``complete`` never arrives keeps its
assistant row at ``is_completed = false`` and is left out of history.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from sqlalchemy import select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from weft_contracts import CompleteEvent, ReferencesEvent, TurnStartedEvent, TurnStatus
from weft_storage.models import ChatSession, Message


class MessageRecorder:
    """Persists what memory needs of the event stream."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession]):
        self._sessions = sessions

    async def handle(self, event: Any) -> None:
        """Dispatch one agent event; events memory does not store are ignored."""
        match event:
            case TurnStartedEvent():
                await self._turn_started(event)
            case ReferencesEvent():
                await self._references(event)
            case CompleteEvent():
                await self._complete(event)
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
                "is_completed": True,
                "status": "completed",
                "created_at": event.time,
            }
            # The assistant row sorts right after its user row, even at equal timestamps.
            assistant = {
                **base,
                "id": event.id + "a",
                "role": "assistant",
                "content": "",
                "status": "running",
                "created_at": event.time + timedelta(microseconds=1),
            }
            for row in (user, assistant):
                await s.execute(insert(Message).values(**row).on_conflict_do_nothing())

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
        data = event.data
        values = {
            "content": data.final_answer,
            "agent_steps": [step.model_dump() for step in data.steps],
            "is_completed": data.status == TurnStatus.COMPLETED,
            "is_fallback": data.is_fallback,
            "status": data.status.value,
            "duration_ms": data.duration_ms,
        }
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


async def _ensure_session(s: AsyncSession, tenant_id: str, session_id: str, user_id: str) -> None:
    """Sessions are normally created through the API; events for an unknown one still land."""
    stmt = insert(ChatSession).values(id=session_id, tenant_id=tenant_id, user_id=user_id)
    await s.execute(stmt.on_conflict_do_nothing())


async def _assistant_row(s: AsyncSession, request_id: str) -> Message | None:
    stmt = select(Message).where(Message.request_id == request_id, Message.role == "assistant")
    return await s.scalar(stmt.with_for_update())
