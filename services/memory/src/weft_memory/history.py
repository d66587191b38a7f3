"""HistoryLoader: stored turns -> LLM-ready messages for the next turn (SPEC M-08, M-09, T-20).

The latest compaction checkpoint becomes a leading summary; rows after it are read newest
first, 200 a page and at most 5000, on the (session_id, created_at DESC, id DESC) index.
User and assistant rows pair by request id; only completed turns count. Turns are taken
from the most recent backwards while they fit the token budget and stop at the first that
does not, so the kept turns are contiguous; the latest is kept even if alone over budget
(the engine's compactor will split it). Rows are released once replayed: memory holds
about one page plus the history being sent.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import select, tuple_
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from weft_context.summary import summary_message
from weft_context.tokens import PER_CONVERSATION_TAIL, TokenEstimator
from weft_storage.memory.models import Message

from weft_memory.replay import KB_RESULT_REDACTION, replay_turn

__all__ = ["KB_RESULT_REDACTION", "History", "HistoryLoader", "HistoryTurn", "replay_turn"]

log = logging.getLogger(__name__)

PAGE_ROWS = 200
MAX_ROWS = 5000
# Only what replay needs: plain rows, no ORM identity map (measured ~2x faster per page).
_COLUMNS = (
    Message.id,
    Message.request_id,
    Message.role,
    Message.content,
    Message.agent_steps,
    Message.images,
    Message.is_completed,
    Message.created_at,
)


@dataclass(kw_only=True)
class HistoryTurn:
    """One replayed turn; ``turn_id`` is its assistant message id (the checkpoint target)."""

    turn_id: str
    request_id: str
    messages: list[dict[str, Any]]
    tokens: int


@dataclass(kw_only=True)
class History:
    """What the engine gets: leading summary (if any) then turns, oldest first."""

    summary: str | None = None
    checkpoint_turn_id: str | None = None
    turns: list[HistoryTurn] = field(default_factory=list)
    tokens: int = 0
    token_scale: float | None = None
    rows_read: int = 0

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The flat message list (summary message first)."""
        head: list[dict[str, Any]] = []
        if self.summary is not None:
            head.append(dict(summary_message(self.summary)))
        return head + [m for turn in self.turns for m in turn.messages]


@dataclass(frozen=True, kw_only=True)
class HistoryQuery:
    """How much history to rebuild and how."""

    token_budget: int | None = None
    """Total tokens of the returned messages; ``None`` = no token limit."""
    max_turns: int | None = None
    """At most this many turns; ``None`` = no limit (agent mode, SPEC M-08)."""
    retain_retrieval_history: bool = False
    vision: bool = False
    """The model reads images: user messages replay theirs as image parts (SPEC E-26)."""


class _TurnPairer:
    """Pairs rows read newest first into completed turns, newest first."""

    def __init__(self) -> None:
        self._assistants: dict[str, Any] = {}

    def add(self, row: Any) -> tuple[Any, Any] | None:
        if row.role == "assistant":
            self._assistants[row.request_id] = row
            return None
        # A user row is the oldest row of its turn: the turn is now whole (or incomplete).
        assistant = self._assistants.pop(row.request_id, None)
        if assistant is None or not assistant.is_completed:
            return None
        return row, assistant


class HistoryLoader:
    """Builds LLM-ready history of one session of one tenant."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession], *, max_rows: int = MAX_ROWS):
        self._sessions = sessions
        self._max_rows = max_rows

    async def load(self, tenant_id: str, session_id: str, max_turns: int) -> list[dict[str, Any]]:
        """The messages of the last ``max_turns`` completed turns, oldest first."""
        history = await self.build(tenant_id, session_id, HistoryQuery(max_turns=max_turns))
        return history.messages

    async def build(self, tenant_id: str, session_id: str, query: HistoryQuery) -> History:
        """History under ``query``'s budget, starting from the latest checkpoint."""
        async with self._sessions() as s:
            checkpoint = await _latest_checkpoint(s, tenant_id, session_id)
            scale = await _latest_scale(s, tenant_id, session_id)
            estimator = TokenEstimator(scale=scale or 1.0)
            history = History(token_scale=scale)
            if checkpoint is not None and checkpoint.context_checkpoint is not None:
                history.summary = str(checkpoint.context_checkpoint.get("summary", ""))
                history.checkpoint_turn_id = checkpoint.id
            after = (checkpoint.created_at, checkpoint.id) if checkpoint else None
            rows = self._rows(s, tenant_id, session_id, after, history)
            await _fill(history, rows, estimator, query)
        return history

    async def _rows(
        self,
        s: AsyncSession,
        tenant_id: str,
        session_id: str,
        after: tuple[datetime, str] | None,
        history: History,
    ) -> AsyncIterator[Any]:
        """Rows newer than ``after``, newest first, one page in memory at a time."""
        cursor: tuple[datetime, str] | None = None
        while history.rows_read < self._max_rows:
            stmt = select(*_COLUMNS).where(
                Message.session_id == session_id, Message.tenant_id == tenant_id
            )
            if after is not None:
                stmt = stmt.where(tuple_(Message.created_at, Message.id) > after)
            if cursor is not None:
                stmt = stmt.where(tuple_(Message.created_at, Message.id) < cursor)
            size = min(PAGE_ROWS, self._max_rows - history.rows_read)
            stmt = stmt.order_by(Message.created_at.desc(), Message.id.desc()).limit(size)
            page = list((await s.execute(stmt)).all())
            history.rows_read += len(page)
            for row in page:
                yield row
            if len(page) < size:
                return
            cursor = (page[-1].created_at, page[-1].id)


async def _fill(
    history: History, rows: AsyncIterator[Any], estimator: TokenEstimator, query: HistoryQuery
) -> None:
    """Take turns newest first while they fit; the first one always."""
    pairer = _TurnPairer()
    total = PER_CONVERSATION_TAIL
    if history.summary is not None:
        total += estimator.message_tokens(summary_message(history.summary))
    newest_first: list[HistoryTurn] = []
    async for row in rows:
        if query.max_turns is not None and len(newest_first) >= query.max_turns:
            break
        pair = pairer.add(row)
        if pair is None:
            continue
        user, assistant = pair
        messages = replay_turn(
            user, assistant, retain_retrieval=query.retain_retrieval_history, vision=query.vision
        )
        tokens = sum(estimator.message_tokens(m) for m in messages)
        over = query.token_budget is not None and total + tokens > query.token_budget
        if over and newest_first:
            break
        newest_first.append(
            HistoryTurn(
                turn_id=assistant.id, request_id=user.request_id, messages=messages, tokens=tokens
            )
        )
        total += tokens
    history.turns = list(reversed(newest_first))
    history.tokens = total


async def _latest_checkpoint(s: AsyncSession, tenant_id: str, session_id: str) -> Message | None:
    """The newest assistant row holding a checkpoint; a failed lookup means none (M-08)."""
    stmt = (
        select(Message)
        .where(
            Message.session_id == session_id,
            Message.tenant_id == tenant_id,
            Message.context_checkpoint.is_not(None),
        )
        .order_by(Message.created_at.desc(), Message.id.desc())
        .limit(1)
    )
    try:
        return await s.scalar(stmt)
    except Exception:  # the reference degrades to "history without checkpoint"
        log.exception("checkpoint lookup failed for session %s", session_id)
        await s.rollback()
        return None


async def _latest_scale(s: AsyncSession, tenant_id: str, session_id: str) -> float | None:
    """The calibration scale of the newest message that has one (SPEC M-02)."""
    stmt = (
        select(Message.context_token_scale)
        .where(
            Message.session_id == session_id,
            Message.tenant_id == tenant_id,
            Message.context_token_scale.is_not(None),
        )
        .order_by(Message.created_at.desc(), Message.id.desc())
        .limit(1)
    )
    return await s.scalar(stmt)
