"""Long-term memory (SPEC M-10, T-17): facts about a caller, scoped to (tenant, user),
extracted after completed turns and recalled by keyword; past conversations searchable.

Search is PostgreSQL full text (GIN on ``memories.tsv`` and on message content); query
words are OR-ed so a question recalls a fact that shares only some of its words.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from weft_storage.memory.models import ChatSession, Message
from weft_storage.memory.models_memory import Memory

_WORD = re.compile(r"[^\W_]{2,}", re.UNICODE)
MAX_QUERY_WORDS = 32


@dataclass(frozen=True, kw_only=True)
class MemoryHit:
    """A recalled fact."""

    id: str
    content: str
    score: float
    created_at: datetime


@dataclass(frozen=True, kw_only=True)
class ConversationHit:
    """A past message of the caller matching a query."""

    session_id: str
    session_title: str
    message_id: str
    role: str
    snippet: str
    created_at: datetime
    score: float


def memory_id(tenant_id: str, user_id: str, content: str) -> str:
    """Stable id of a fact: the same fact of the same caller is stored once."""
    norm = " ".join(content.lower().split())
    digest = hashlib.sha256(f"{tenant_id}\x00{user_id}\x00{norm}".encode()).hexdigest()
    return f"mem_{digest[:32]}"


def or_query(text: str) -> str | None:
    """A ``to_tsquery`` text OR-ing the words of ``text`` (no operator injection)."""
    words = list(dict.fromkeys(w.lower() for w in _WORD.findall(text)))[:MAX_QUERY_WORDS]
    return " | ".join(words) if words else None


class LongTermMemory:
    """Facts and past conversations of one caller."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession]):
        self._sessions = sessions

    async def remember(
        self, tenant_id: str, user_id: str, facts: list[str], *, session_id: str, request_id: str
    ) -> list[str]:
        """Store ``facts``; returns their ids (idempotent)."""
        async with self._sessions.begin() as s:
            return await store_facts(
                s, tenant_id, user_id, facts, session_id=session_id, request_id=request_id
            )

    async def search(
        self, tenant_id: str, user_id: str, query: str, limit: int = 10
    ) -> list[MemoryHit]:
        """Facts of the caller matching ``query``, best first; newest first without words."""
        scope = (Memory.tenant_id == tenant_id, Memory.user_id == user_id)
        tsquery = or_query(query)
        if tsquery is None:
            stmt = select(Memory).where(*scope).order_by(Memory.created_at.desc()).limit(limit)
            async with self._sessions() as s:
                return [_hit(m, 0.0) for m in (await s.scalars(stmt)).all()]
        q = func.to_tsquery("english", tsquery)
        rank = func.ts_rank_cd(Memory.tsv, q).label("score")
        stmt2 = (
            select(Memory, rank)
            .where(*scope, Memory.tsv.op("@@")(q))
            .order_by(rank.desc(), Memory.created_at.desc())
            .limit(limit)
        )
        async with self._sessions() as s:
            return [_hit(m, float(score)) for m, score in (await s.execute(stmt2)).all()]

    async def search_conversations(
        self, tenant_id: str, user_id: str, query: str, limit: int = 5
    ) -> list[ConversationHit]:
        """Completed messages of the caller's live sessions matching ``query``."""
        tsquery = or_query(query)
        if tsquery is None:
            return []
        q = func.to_tsquery("english", tsquery)
        doc = func.to_tsvector("english", Message.content)
        rank = func.ts_rank_cd(doc, q).label("score")
        stmt = (
            select(Message, ChatSession.title, rank)
            .join(ChatSession, ChatSession.id == Message.session_id)
            .where(
                Message.tenant_id == tenant_id,
                ChatSession.tenant_id == tenant_id,
                ChatSession.user_id == user_id,
                ChatSession.deleted_at.is_(None),
                Message.is_completed.is_(True),
                doc.op("@@")(q),
            )
            .order_by(rank.desc(), Message.created_at.desc())
            .limit(limit)
        )
        async with self._sessions() as s:
            rows = (await s.execute(stmt)).all()
        return [
            ConversationHit(
                session_id=m.session_id, session_title=title, message_id=m.id, role=m.role,
                snippet=_snippet(m.content), created_at=m.created_at, score=float(score),
            )
            for m, title, score in rows
        ]  # fmt: skip

    async def forget(self, tenant_id: str, user_id: str, memory_id_: str) -> bool:
        """Delete one fact of the caller; False when it is not theirs or does not exist."""
        async with self._sessions.begin() as s:
            row = await s.get(Memory, memory_id_)
            if row is None or row.tenant_id != tenant_id or row.user_id != user_id:
                return False
            await s.delete(row)
        return True


async def store_facts(
    s: AsyncSession,
    tenant_id: str,
    user_id: str,
    facts: list[str],
    *,
    session_id: str,
    request_id: str,
) -> list[str]:
    """Insert ``facts`` of the caller in ``s``'s transaction; a known fact is kept once."""
    unique = {memory_id(tenant_id, user_id, f): f.strip() for f in facts if f.strip()}
    rows = [
        {
            "id": mid, "tenant_id": tenant_id, "user_id": user_id, "content": fact,
            "source_session_id": session_id, "source_request_id": request_id,
        }
        for mid, fact in unique.items()
    ]  # fmt: skip
    if rows:
        await s.execute(insert(Memory).values(rows).on_conflict_do_nothing())
    return [str(r["id"]) for r in rows]


def _hit(m: Memory, score: float) -> MemoryHit:
    return MemoryHit(id=m.id, content=m.content, score=score, created_at=m.created_at)


def _snippet(text: str, size: int = 300) -> str:
    return text if len(text) <= size else text[:size] + "..."


def parse_facts(answer: str) -> list[str]:
    """Facts from the extractor's answer: a JSON array of strings, else "- " bullet lines."""
    start, end = answer.find("["), answer.rfind("]")
    if 0 <= start < end:
        try:
            data: Any = json.loads(answer[start : end + 1])
        except ValueError:
            data = None
        if isinstance(data, list):
            return [str(x).strip() for x in data if isinstance(x, str | int | float) and str(x)]
    lines = (line.strip() for line in answer.splitlines())
    return [
        line[2:].strip() for line in lines if line.startswith(("- ", "* ")) and line[2:].strip()
    ]
