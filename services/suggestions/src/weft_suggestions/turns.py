"""What the suggestions service keeps of each turn, from ``agent.events`` alone: the
user's question (``turn_started``), the sources (``references``) and the answer
(``complete``). Every write is idempotent, so a re-delivered batch changes nothing."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from weft_contracts import CompleteEvent, ReferencesEvent, TurnStartedEvent
from weft_storage.suggestions.models import SuggestionEvent, SuggestionTurn

from weft_suggestions.generation import Exchange

TurnEvent = TurnStartedEvent | ReferencesEvent | CompleteEvent


@dataclass(frozen=True, kw_only=True)
class FinishedTurn:
    """A turn whose ``complete`` was seen, as generation needs it."""

    tenant_id: str
    session_id: str
    request_id: str
    user_id: str
    agent_id: str
    user_message_id: str
    query: str
    answer: str
    status: str
    is_fallback: bool
    references: list[dict[str, Any]]
    credential: str | None
    completed_at: datetime | None
    locale: str | None = None
    """The user's language from the request (None: the service's default)."""


class TurnLog:
    """Records turns and reads them back for generation and the API."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession]):
        self._sessions = sessions

    async def record(self, events: Sequence[TurnEvent]) -> None:
        """Store what ``events`` say about their turns, in order, in one transaction."""
        async with self._sessions.begin() as s:
            for event in events:
                await _apply(s, event)

    async def turn(self, tenant_id: str, request_id: str) -> FinishedTurn | None:
        """The finished turn ``request_id`` of ``tenant_id`` (None: unknown or running)."""
        async with self._sessions() as s:
            row = await s.get(SuggestionTurn, (tenant_id, request_id))
        if row is None or row.status is None:
            return None
        return _finished(row)

    async def exchanges(self, turn: FinishedTurn, limit: int) -> list[Exchange]:
        """The last ``limit`` finished turns of the session up to ``turn``, oldest first."""
        query = (
            select(SuggestionTurn)
            .where(
                SuggestionTurn.tenant_id == turn.tenant_id,
                SuggestionTurn.session_id == turn.session_id,
                SuggestionTurn.status.is_not(None),
                SuggestionTurn.user_message_id <= turn.user_message_id,
            )
            .order_by(SuggestionTurn.user_message_id.desc())
            .limit(limit)
        )
        async with self._sessions() as s:
            rows = (await s.scalars(query)).all()
        return [Exchange(question=r.query, answer=r.answer or "") for r in reversed(rows)]

    async def owner_turn(
        self, tenant_id: str, user_id: str, session_id: str, assistant_message_id: str
    ) -> FinishedTurn | None:
        """The finished turn whose assistant message is ``assistant_message_id``, if it is
        in this user's session of this tenant (None otherwise: the API answers 404)."""
        user_message_id = assistant_message_id.removesuffix("a")
        if user_message_id == assistant_message_id:
            return None
        query = select(SuggestionTurn).where(
            SuggestionTurn.tenant_id == tenant_id,
            SuggestionTurn.session_id == session_id,
            SuggestionTurn.user_id == user_id,
            SuggestionTurn.user_message_id == user_message_id,
        )
        async with self._sessions() as s:
            row = (await s.scalars(query)).first()
        if row is None or row.status is None:
            return None
        return _finished(row)


async def _apply(s: AsyncSession, event: TurnEvent) -> None:
    key = (SuggestionTurn.tenant_id == event.tenant_id) & (
        SuggestionTurn.request_id == event.request_id
    )
    match event:
        case TurnStartedEvent():
            await s.execute(
                insert(SuggestionTurn)
                .values(
                    tenant_id=event.tenant_id,
                    request_id=event.request_id,
                    session_id=event.session_id,
                    user_id=event.data.user_id,
                    agent_id=event.data.agent_id,
                    user_message_id=event.id,
                    query=event.data.query,
                    references=[],
                    credential=event.credential,
                    locale=event.data.locale,
                )
                .on_conflict_do_nothing()
            )
            await _attribute_clicks(s, event)
        case ReferencesEvent():
            refs = [r.model_dump(mode="json") for r in event.data.references]
            await s.execute(update(SuggestionTurn).where(key).values(references=refs))
        case CompleteEvent():
            await s.execute(
                update(SuggestionTurn)
                .where(key)
                .values(
                    answer=event.data.final_answer,
                    status=event.data.status.value,
                    is_fallback=event.data.is_fallback,
                    completed_at=event.time,
                    credential=event.credential or SuggestionTurn.credential,
                )
            )


async def _attribute_clicks(s: AsyncSession, event: TurnStartedEvent) -> None:
    """SPEC Q-05: a click is attributed to the next user message of its session."""
    await s.execute(
        update(SuggestionEvent)
        .where(
            SuggestionEvent.tenant_id == event.tenant_id,
            SuggestionEvent.session_id == event.session_id,
            SuggestionEvent.kind == "click",
            SuggestionEvent.attributed_message_id.is_(None),
            SuggestionEvent.created_at <= event.time,
        )
        .values(attributed_message_id=event.id)
    )


def _finished(row: SuggestionTurn) -> FinishedTurn:
    return FinishedTurn(
        tenant_id=row.tenant_id,
        session_id=row.session_id,
        request_id=row.request_id,
        user_id=row.user_id,
        agent_id=row.agent_id,
        user_message_id=row.user_message_id,
        query=row.query,
        answer=row.answer or "",
        status=row.status or "",
        is_fallback=row.is_fallback,
        references=list(row.references or []),
        credential=row.credential,
        completed_at=row.completed_at,
        locale=row.locale,
    )
