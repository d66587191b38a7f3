"""Deleting messages of a session, and the checkpoints that die with them (SPEC M-07).

A compaction checkpoint stored on turn *k* summarises every message up to *k*. When
messages are deleted (one turn, or a rollback that truncates the session from a turn on),
a checkpoint stored on a surviving message newer than the oldest deleted one still
describes the deleted messages, so it is cleared in the same transaction; the next history
reload falls back to the newest checkpoint older than the deletion, or to none (M-08).
Checkpoints on the deleted rows go with them.

The workspace follows the history (SPEC S-03): a rollback, clearing every message, or
deleting the session's last turn points the sandbox's workspace back at the checkpoint of
the last remaining turn, or at an empty workspace when none remains. The sandbox owns the
checkpoints: memory asks it (:mod:`weft_memory.workspaces`) after deleting the messages in
its open transaction and before committing, so a sandbox that cannot do it leaves the
history as it was. Deleting a turn that later turns followed leaves the workspace alone:
their files grew from that turn's.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import delete, null, select, tuple_, update
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.sql.elements import ColumnElement
from weft_storage.memory.models import Message

from weft_memory.workspaces import Workspaces


class UnknownMessage(LookupError):
    """The message is not in this session."""


async def delete_turn(
    s: AsyncSession, workspaces: Workspaces, tenant_id: str, session_id: str, message_id: str
) -> int:
    """Delete the turn of ``message_id`` (its user and assistant rows); returns rows deleted."""
    anchor = await message_in(s, tenant_id, session_id, message_id)
    scope = session_scope(tenant_id, session_id)
    oldest = await oldest_of_request(s, tenant_id, session_id, anchor.request_id)
    deleted = await s.execute(
        delete(Message).where(*scope, Message.request_id == anchor.request_id).returning(Message.id)
    )
    count = len(deleted.all())
    await invalidate_checkpoints(s, tenant_id, session_id, oldest)
    later = await s.scalar(
        select(Message.id)
        .where(
            *session_scope(tenant_id, session_id), tuple_(Message.created_at, Message.id) > oldest
        )
        .limit(1)
    )
    if later is None:  # it was the last turn: its files go with it
        await roll_back_workspace(s, workspaces, tenant_id, session_id)
    return count


async def truncate_from(
    s: AsyncSession, workspaces: Workspaces, tenant_id: str, session_id: str, message_id: str
) -> int:
    """Rollback: delete the turn of ``message_id`` and every newer message."""
    anchor = await message_in(s, tenant_id, session_id, message_id)
    oldest = await oldest_of_request(s, tenant_id, session_id, anchor.request_id)
    deleted = await s.execute(
        delete(Message)
        .where(
            *session_scope(tenant_id, session_id), tuple_(Message.created_at, Message.id) >= oldest
        )
        .returning(Message.id)
    )
    # Nothing newer survives, so every remaining checkpoint is older and still valid.
    count = len(deleted.all())
    await roll_back_workspace(s, workspaces, tenant_id, session_id)
    return count


async def roll_back_workspace(
    s: AsyncSession, workspaces: Workspaces, tenant_id: str, session_id: str
) -> None:
    """Point the workspace at the checkpoint of the last turn that still has messages
    (as ``s`` sees them: its own deletions included, not yet committed)."""
    remaining = await s.scalars(
        select(Message.request_id).where(*session_scope(tenant_id, session_id)).distinct()
    )
    await workspaces.roll_back(tenant_id, session_id, set(remaining.all()))


async def invalidate_checkpoints(
    s: AsyncSession, tenant_id: str, session_id: str, oldest_deleted: tuple[datetime, str]
) -> None:
    """Clear the checkpoints stored after ``oldest_deleted``: they summarise deleted rows."""
    await s.execute(
        update(Message)
        .where(
            *session_scope(tenant_id, session_id),
            Message.context_checkpoint.is_not(None),
            tuple_(Message.created_at, Message.id) > oldest_deleted,
        )
        .values(context_checkpoint=null())  # SQL NULL, not the JSON null
    )


def session_scope(
    tenant_id: str, session_id: str
) -> tuple[ColumnElement[bool], ColumnElement[bool]]:
    return Message.session_id == session_id, Message.tenant_id == tenant_id


async def message_in(s: AsyncSession, tenant_id: str, session_id: str, message_id: str) -> Message:
    stmt = select(Message).where(*session_scope(tenant_id, session_id), Message.id == message_id)
    row = await s.scalar(stmt)
    if row is None:
        raise UnknownMessage(message_id)
    return row


async def oldest_of_request(
    s: AsyncSession, tenant_id: str, session_id: str, request_id: str
) -> tuple[datetime, str]:
    row = (
        await s.execute(
            select(Message.created_at, Message.id)
            .where(*session_scope(tenant_id, session_id), Message.request_id == request_id)
            .order_by(Message.created_at, Message.id)
            .limit(1)
        )
    ).one()
    return row.created_at, row.id
