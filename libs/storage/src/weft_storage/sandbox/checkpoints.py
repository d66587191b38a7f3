"""Fork and rollback of a session's workspace checkpoints (SPEC S-03, M-07), as row
operations on ``sandbox_checkpoints``.

The sandbox writes a row after each write call (tenant, session, ``seq``, turn, call, git
commit); only the newest row of a session keeps the repository as a git bundle, which holds
every earlier commit. A replica restores a session's newest row: it fetches the bundle and
checks out *that row's commit*, which need not be the bundle's tip. So pointing a session's
workspace at an earlier commit is a new row, newer than any copy a replica holds, with an
older commit and the newest bundle: no git, no bytes leave PostgreSQL, and it commits in
the same transaction as the messages memory deletes or copies (a fork or a rollback is
never half done). A row whose commit is :data:`EMPTY` means "no files".

Every statement is scoped by tenant and session: a fork reads the source session's rows
of the caller's tenant only, so it can never copy another tenant's checkpoints.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from sqlalchemy import bindparam, text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

EMPTY = ""
"""The commit of a row that stands for an empty workspace (a rollback before any file)."""

FORK_CALL = "fork"
ROLLBACK_CALL = "rollback"

_SEQ_ATTEMPTS = 5


@dataclass(frozen=True)
class CheckpointRow:
    """One ``sandbox_checkpoints`` row, without its bundle."""

    seq: int
    request_id: str
    commit: str


async def rows(s: AsyncSession, tenant_id: str, session_id: str) -> list[CheckpointRow]:
    """The session's checkpoints, oldest first."""
    result = await s.execute(
        text(
            "SELECT seq, request_id, commit FROM sandbox_checkpoints "
            "WHERE tenant_id = :t AND session_id = :s ORDER BY seq"
        ),
        {"t": tenant_id, "s": session_id},
    )
    return [CheckpointRow(int(r[0]), str(r[1]), str(r[2])) for r in result.all()]


async def fork(
    s: AsyncSession,
    tenant_id: str,
    source_session_id: str,
    target_session_id: str,
    turns: Mapping[str, str],
) -> int:
    """Give ``target_session_id`` (new, without rows) the checkpoints of the source's
    turns ``turns`` (source request id -> the fork's request id); the workspace of the
    fork is the last of them. Returns the rows copied (0: the fork starts empty)."""
    kept = [row for row in await rows(s, tenant_id, source_session_id) if row.request_id in turns]
    if not kept:
        return 0
    for seq, row in enumerate(kept, start=1):
        newest = seq == len(kept)
        await s.execute(
            text(
                "INSERT INTO sandbox_checkpoints "
                "(tenant_id, session_id, seq, request_id, call_id, commit, bundle, size_bytes) "
                "SELECT :t, :target, :q, :r, :c, :commit, b.bundle, coalesce(b.size_bytes, 0) "
                "FROM (SELECT 1) AS one LEFT JOIN (" + _NEWEST_BUNDLE + ") AS b ON :newest"
            ),
            {
                "t": tenant_id, "s": source_session_id, "target": target_session_id,
                "q": seq, "r": turns[row.request_id], "c": FORK_CALL, "commit": row.commit,
                "newest": newest,
            },
        )  # fmt: skip
    return len(kept)


async def roll_back(
    s: AsyncSession, tenant_id: str, session_id: str, remaining: Collection[str]
) -> int | None:
    """Point the session's workspace at the last checkpoint of the turns ``remaining``
    (request ids), or at an empty workspace when none of them has one. Checkpoints of the
    other turns are deleted. Returns the new row's ``seq``, or None when the workspace is
    already there (no row was needed)."""
    for _ in range(_SEQ_ATTEMPTS):
        try:
            async with s.begin_nested():
                return await _roll_back_once(s, tenant_id, session_id, set(remaining))
        except IntegrityError:
            continue  # a sandbox replica stored that seq first: go on from its row
    raise RuntimeError(f"could not number a rollback checkpoint of session {session_id!r}")


async def _roll_back_once(
    s: AsyncSession, tenant_id: str, session_id: str, remaining: set[str]
) -> int | None:
    history = await rows(s, tenant_id, session_id)
    if not history:
        return None
    newest = history[-1]
    target = next((row for row in reversed(history) if row.request_id in remaining), None)
    if target is newest or (target is None and newest.commit == EMPTY):
        return None
    seq = newest.seq + 1
    params = {
        "t": tenant_id, "s": session_id, "q": seq, "c": ROLLBACK_CALL,
        "r": EMPTY if target is None else target.request_id,
        "commit": EMPTY if target is None else target.commit,
        "with_bundle": target is not None,
    }  # fmt: skip
    # The bundle of the newest row holds every commit a remaining row names.
    await s.execute(
        text(
            "INSERT INTO sandbox_checkpoints "
            "(tenant_id, session_id, seq, request_id, call_id, commit, bundle, size_bytes) "
            "SELECT :t, :s, :q, :r, :c, :commit, b.bundle, coalesce(b.size_bytes, 0) "
            "FROM (SELECT 1) AS one LEFT JOIN (" + _NEWEST_BUNDLE + ") AS b ON :with_bundle"
        ),
        params,
    )
    await s.execute(
        text(
            "UPDATE sandbox_checkpoints SET bundle = NULL WHERE tenant_id = :t "
            "AND session_id = :s AND seq < :q AND bundle IS NOT NULL"
        ),
        params,
    )
    await s.execute(
        text(
            "DELETE FROM sandbox_checkpoints WHERE tenant_id = :t AND session_id = :s "
            "AND seq < :q AND request_id NOT IN :remaining"
        ).bindparams(bindparam("remaining", expanding=True)),
        {**params, "remaining": sorted(remaining) or [EMPTY]},
    )
    return seq


_NEWEST_BUNDLE = (
    "SELECT bundle, size_bytes FROM sandbox_checkpoints WHERE tenant_id = :t "
    "AND session_id = :s AND bundle IS NOT NULL ORDER BY seq DESC LIMIT 1"
)
