"""Forking a session (SPEC S-03, M-07): a new session of the same tenant and user with the
history up to and including one turn, the compaction checkpoints of that history, and the
workspace as that turn left it.

A compaction checkpoint sits on the assistant message of the turn where its summarised part
ends, so the checkpoints on the copied messages are exactly those that end at or before the
fork point; a checkpoint stored on a later turn is not copied. Message ids and turn (request)
ids are new: ``(request_id, role)`` is the messages' natural key, and the copied workspace
checkpoints name the fork's turns, so a later rollback of the fork finds them.

The workspace checkpoints are the sandbox's: memory asks it to copy them
(:mod:`weft_memory.workspaces`) once the fork's rows are written in memory's open
transaction and before it commits. The fork's session id is new, so until memory commits
no one can see the copied checkpoints; a sandbox that fails leaves no fork at all.
"""

from __future__ import annotations

from sqlalchemy import null, select, tuple_
from sqlalchemy.ext.asyncio import AsyncSession
from ulid import ULID
from weft_contracts.events import assistant_message_id
from weft_storage.memory.models import ChatSession, Message

from weft_memory.rollback import UnknownMessage, message_in, oldest_of_request, session_scope
from weft_memory.workspaces import Workspaces

_COPIED = [
    c.key for c in Message.__table__.columns if c.key not in {"id", "session_id", "request_id"}
]


class TurnStillRunning(RuntimeError):
    """A turn to copy has not ended: its copy would look like a turn that never ends."""


async def fork_session(
    s: AsyncSession, workspaces: Workspaces, source: ChatSession, at_message_id: str | None
) -> ChatSession:
    """Create the fork of ``source`` (at the turn of ``at_message_id``, or whole) in the
    caller's transaction; raises :class:`UnknownMessage` for a message not in ``source``."""
    messages = await _history(s, source, at_message_id)
    running = [m.request_id for m in messages if m.role == "assistant" and m.status == "running"]
    if running:
        raise TurnStillRunning(running[0])
    fork = ChatSession(
        id=f"ses_{ULID()}", tenant_id=source.tenant_id, user_id=source.user_id,
        title=source.title, agent_id=source.agent_id,
    )  # fmt: skip
    s.add(fork)
    await s.flush()
    turns: dict[str, str] = {}
    for message in messages:
        if message.request_id not in turns:
            turns[message.request_id] = f"req_{ULID()}"
        copy = Message(
            **{key: _sql(getattr(message, key)) for key in _COPIED},
            id=_copied_id(message, turns[message.request_id]),
            session_id=fork.id,
            request_id=turns[message.request_id],
        )
        s.add(copy)
    await s.flush()
    await workspaces.fork(source.tenant_id, source.id, fork.id, turns)
    return fork


async def _history(
    s: AsyncSession, source: ChatSession, at_message_id: str | None
) -> list[Message]:
    scope = session_scope(source.tenant_id, source.id)
    stmt = select(Message).where(*scope)
    if at_message_id is not None:
        anchor = await message_in(s, source.tenant_id, source.id, at_message_id)
        oldest = await oldest_of_request(s, source.tenant_id, source.id, anchor.request_id)
        stmt = stmt.where(
            (tuple_(Message.created_at, Message.id) < oldest)
            | (Message.request_id == anchor.request_id)
        )
    stmt = stmt.order_by(Message.created_at, Message.id)
    return list((await s.scalars(stmt)).all())


def _sql(value: object) -> object:
    # None must stay SQL NULL: the JSONB columns would store a JSON null, and a JSON null
    # context_checkpoint counts as a checkpoint (IS NOT NULL) that hides the history.
    return null() if value is None else value


def _copied_id(message: Message, fork_request_id: str) -> str:
    # The assistant row keeps its id's relation to the user row (assistant_message_id),
    # derived from the fork's turn id so both halves of a copied turn agree.
    base = fork_request_id.removeprefix("req_")
    if message.role == "user":
        return base
    return assistant_message_id(base) if message.role == "assistant" else str(ULID())


__all__ = ["TurnStillRunning", "UnknownMessage", "fork_session"]
