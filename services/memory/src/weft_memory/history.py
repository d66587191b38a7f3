"""HistoryLoader: stored turns -> OpenAI-protocol messages for the next turn (SPEC M-08/M-09).

Completed turns only, most recent ``max_turns``, each replayed as user -> assistant with
tool_calls + one tool message per call -> final answer. Past knowledge-search results are
replaced by the fixed redaction text (SPEC T-20): the knowledge base may have changed.
Token budgeting and compaction checkpoints come with the memory issue.
"""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from weft_storage.models import Message

KB_RESULT_REDACTION = (
    "[Previous retrieval result omitted - knowledge base may have changed. "
    "Please perform a fresh search.]"
)
KB_TOOLS = frozenset({"search_knowledge", "read_document", "list_documents"})
PAGE_ROWS = 200


class HistoryLoader:
    """Builds LLM-ready history of one session of one tenant."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession]):
        self._sessions = sessions

    async def load(self, tenant_id: str, session_id: str, max_turns: int) -> list[dict[str, Any]]:
        """The messages of the last ``max_turns`` completed turns, oldest first."""
        stmt = (
            select(Message)
            .where(Message.tenant_id == tenant_id, Message.session_id == session_id)
            .order_by(Message.created_at.desc(), Message.id.desc())
            .limit(PAGE_ROWS)
        )
        async with self._sessions() as s:
            rows = list((await s.scalars(stmt)).all())
        turns = _completed_turns(rows)[:max_turns]
        messages: list[dict[str, Any]] = []
        for user, assistant in reversed(turns):
            messages.extend(replay_turn(user, assistant))
        return messages


def _completed_turns(rows_newest_first: list[Message]) -> list[tuple[Message, Message]]:
    by_request: dict[str, dict[str, Message]] = {}
    order: list[str] = []
    for row in rows_newest_first:
        if row.request_id not in by_request:
            order.append(row.request_id)
        by_request.setdefault(row.request_id, {})[row.role] = row
    turns = []
    for request_id in order:
        pair = by_request[request_id]
        user, assistant = pair.get("user"), pair.get("assistant")
        if user and assistant and assistant.is_completed:
            turns.append((user, assistant))
    return turns


def replay_turn(user: Message, assistant: Message) -> list[dict[str, Any]]:
    """One stored turn as OpenAI messages (SPEC M-09)."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": user.content}]
    for step in assistant.agent_steps:
        calls = step.get("tool_calls") or []
        if not calls:
            continue
        messages.append(
            {
                "role": "assistant",
                "content": step.get("thought") or "",
                "tool_calls": [
                    {
                        "id": c["call_id"],
                        "type": "function",
                        "function": {
                            "name": c["tool_name"],
                            "arguments": json.dumps(c.get("arguments") or {}),
                        },
                    }
                    for c in calls
                ],
            }
        )
        messages.extend(
            {"role": "tool", "tool_call_id": c["call_id"], "content": _tool_content(c)}
            for c in calls
        )
    messages.append({"role": "assistant", "content": assistant.content})
    return messages


def _tool_content(call: dict[str, Any]) -> str:
    if call.get("tool_name") in KB_TOOLS:
        return KB_RESULT_REDACTION
    if call.get("success"):
        return str(call.get("output") or "")
    return f"Error: {call.get('error') or 'unknown error'}"
