"""Fork and rollback of a session carry its workspace (SPEC S-03, M-07): memory's fork and
rollback ask the sandbox's checkpoint routes (in process here) to write the
``sandbox_checkpoints`` rows before memory commits the messages it copies or deletes, and
every sandbox replica, holding a copy or not, then serves the workspace as
the kept turn left it. Real PostgreSQL and Redis, in-process sandbox replicas with the
real local backend (tests/integration/sandbox_kit.py)."""

from __future__ import annotations

import secrets
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from fastapi import HTTPException
from redis.asyncio import Redis
from sqlalchemy import select, text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from weft_memory.fork import fork_session
from weft_memory.history import HistoryLoader, HistoryQuery
from weft_memory.rollback import delete_turn, truncate_from
from weft_memory.workspaces import SandboxWorkspaces
from weft_platform.retry import RetryWindow
from weft_storage.memory.models import ChatSession, Message
from weft_storage.sandbox import checkpoints as workspace_checkpoints
from weft_storage.sandbox.checkpoints import CheckpointRow

from tests.integration.sandbox_kit import Sandbox, open_sandbox
from tests.workspaces_kit import sandbox_workspaces


@pytest.fixture
def workspaces(sessions: async_sessionmaker[AsyncSession]) -> SandboxWorkspaces:
    """The sandbox's checkpoint routes, in process, as memory asks them."""
    return sandbox_workspaces(sessions)


async def _session(
    sessions: async_sessionmaker[AsyncSession], tenant: str, turns: list[str]
) -> tuple[str, dict[str, str]]:
    """A session with one finished turn per request id (user + assistant rows), each
    assistant row holding a compaction checkpoint named after its turn; returns the session
    id and each turn's user message id."""
    session_id = f"ses_{secrets.token_hex(6)}"
    start = datetime.now(UTC)
    users: dict[str, str] = {}
    async with sessions.begin() as s:
        s.add(ChatSession(id=session_id, tenant_id=tenant, user_id="u", title="t"))
        await s.flush()
        for i, turn in enumerate(turns):
            at = start + timedelta(seconds=i)
            base = secrets.token_hex(8)
            users[turn] = base
            s.add_all([
                Message(id=base, tenant_id=tenant, session_id=session_id, request_id=turn,
                        role="user", content=f"ask {turn}", status="completed",
                        is_completed=True, created_at=at),
                Message(id=base + "a", tenant_id=tenant, session_id=session_id,
                        request_id=turn, role="assistant", content=f"answer {turn}",
                        status="completed", is_completed=True,
                        created_at=at + timedelta(microseconds=1),
                        context_checkpoint={"summary": f"up to {turn}"}),
            ])  # fmt: skip
    return session_id, users


async def _two_turns(box: Sandbox, session: str, turns: list[str]) -> None:
    """Turn 1 writes a.txt; turn 2 writes b.txt and changes a.txt."""
    one = await box.call("write_sandbox_file", session=session, turn=turns[0],
                         path="a.txt", content="one")  # fmt: skip
    assert one.success and one.data["checkpoint"] == 1, one
    two = await box.call("shell_exec", session=session, turn=turns[1],
                         command="echo two > b.txt && echo changed > a.txt")  # fmt: skip
    assert two.success and two.data["checkpoint"] == 2, two


async def _files(box: Sandbox, session: str) -> str:
    listed = await box.call("shell_exec", session=session,
                            command="for f in *.txt; do echo \"$f=$(cat $f)\"; done")  # fmt: skip
    assert listed.success, listed
    return listed.output.split("stdout:\n")[1].split("stderr:")[0].strip()


async def _checkpoint_rows(
    sessions: async_sessionmaker[AsyncSession], tenant: str, session: str
) -> list[tuple[int, str, bool]]:
    async with sessions() as db:
        rows = await db.execute(
            text(
                "SELECT seq, request_id, bundle IS NOT NULL FROM sandbox_checkpoints "
                "WHERE tenant_id = :t AND session_id = :s ORDER BY seq"
            ),
            {"t": tenant, "s": session},
        )
    return [(int(r[0]), str(r[1]), bool(r[2])) for r in rows.all()]


async def test_a_fork_at_a_turn_gets_that_turns_history_checkpoints_and_files(
    sessions: async_sessionmaker[AsyncSession], workspaces: SandboxWorkspaces, redis: Redis
) -> None:  # SPEC S-03, M-07 (fork copies)
    tenant = f"tenant-{secrets.token_hex(4)}"
    turns = [f"req_{secrets.token_hex(6)}" for _ in range(2)]
    source, users = await _session(sessions, tenant, turns)
    async with open_sandbox(sessions, redis, tenant=tenant) as box:
        await _two_turns(box, source, turns)
        async with sessions.begin() as s:
            origin = await s.get_one(ChatSession, source)
            fork = (await fork_session(s, workspaces, origin, users[turns[0]])).id

        async with sessions() as s:
            copied = list(
                (await s.scalars(
                    select(Message).where(Message.session_id == fork)
                    .order_by(Message.created_at, Message.id)
                )).all()
            )  # fmt: skip
            forked = await s.get_one(ChatSession, fork)
        assert (forked.tenant_id, forked.user_id) == (tenant, "u")
        assert [(m.role, m.content) for m in copied] == [
            ("user", f"ask {turns[0]}"), ("assistant", f"answer {turns[0]}"),
        ]  # fmt: skip
        # Turn 2's checkpoint summarises past the fork point: not copied (M-07); the user
        # row has none (SQL NULL: a JSON null would count as a checkpoint).
        assert [m.context_checkpoint for m in copied] == [None, {"summary": f"up to {turns[0]}"}]
        async with sessions() as s:
            marked = await s.scalars(
                select(Message.role).where(
                    Message.session_id == fork, Message.context_checkpoint.is_not(None)
                )
            )
            assert list(marked) == ["assistant"]
        history = await HistoryLoader(sessions).build(tenant, fork, HistoryQuery(max_turns=5))
        assert history.summary == f"up to {turns[0]}"
        fork_turn = copied[0].request_id
        assert fork_turn not in turns and copied[1].request_id == fork_turn
        assert copied[1].id == copied[0].id + "a"

        assert await _checkpoint_rows(sessions, tenant, fork) == [(1, fork_turn, True)]
        assert await _files(box, fork) == "a.txt=one"  # no b.txt, a.txt as of turn 1
        assert await _files(box, source) == "a.txt=changed\nb.txt=two"  # source untouched
        more = await box.call("write_sandbox_file", session=fork, turn="req_next",
                              path="c.txt", content="fork")  # fmt: skip
        assert more.success and more.data["checkpoint"] == 2, more

    async with open_sandbox(sessions, redis, tenant=tenant) as fresh:  # restores from rows
        assert await _files(fresh, fork) == "a.txt=one\nc.txt=fork"


async def test_a_whole_fork_and_a_fork_of_a_session_without_files(
    sessions: async_sessionmaker[AsyncSession], workspaces: SandboxWorkspaces, redis: Redis
) -> None:  # SPEC S-03
    tenant = f"tenant-{secrets.token_hex(4)}"
    turns = [f"req_{secrets.token_hex(6)}" for _ in range(2)]
    source, _ = await _session(sessions, tenant, turns)
    bare, _ = await _session(sessions, tenant, [f"req_{secrets.token_hex(6)}"])
    async with open_sandbox(sessions, redis, tenant=tenant) as box:
        await _two_turns(box, source, turns)
        async with sessions.begin() as s:
            whole = (
                await fork_session(s, workspaces, await s.get_one(ChatSession, source), None)
            ).id
            empty = (await fork_session(s, workspaces, await s.get_one(ChatSession, bare), None)).id
        assert [r[0] for r in await _checkpoint_rows(sessions, tenant, whole)] == [1, 2]
        assert await _files(box, whole) == "a.txt=changed\nb.txt=two"
        assert await _checkpoint_rows(sessions, tenant, empty) == []
        assert await _files(box, empty) == "*.txt="  # the glob matched nothing


async def test_a_rollback_reaches_every_replica_holding_the_workspace(
    sessions: async_sessionmaker[AsyncSession], workspaces: SandboxWorkspaces, redis: Redis
) -> None:  # SPEC S-03, M-07 (rollback invalidates)
    tenant = f"tenant-{secrets.token_hex(4)}"
    turns = [f"req_{secrets.token_hex(6)}" for _ in range(2)]
    session, users = await _session(sessions, tenant, turns)
    async with (
        open_sandbox(sessions, redis, tenant=tenant) as a,
        open_sandbox(sessions, redis, tenant=tenant) as b,
    ):
        await _two_turns(a, session, turns)
        assert await _files(b, session) == "a.txt=changed\nb.txt=two"  # b holds seq 2 too
        async with sessions.begin() as s:
            await truncate_from(s, workspaces, tenant, session, users[turns[1]])

        rows = await _checkpoint_rows(sessions, tenant, session)
        assert rows == [(1, turns[0], False), (3, turns[0], True)]  # turn 2's rows gone
        assert await _files(a, session) == "a.txt=one"
        assert await _files(b, session) == "a.txt=one"
        again = await b.call("write_sandbox_file", session=session, turn="req_3",
                             path="d.txt", content="after")  # fmt: skip
        assert again.success and again.data["checkpoint"] == 4, again
        assert await _files(a, session) == "a.txt=one\nd.txt=after"


async def test_rolling_back_every_turn_empties_the_workspace_and_it_goes_on(
    sessions: async_sessionmaker[AsyncSession], workspaces: SandboxWorkspaces, redis: Redis
) -> None:  # SPEC S-03
    tenant = f"tenant-{secrets.token_hex(4)}"
    turns = [f"req_{secrets.token_hex(6)}" for _ in range(2)]
    session, users = await _session(sessions, tenant, turns)
    async with open_sandbox(sessions, redis, tenant=tenant) as box:
        await _two_turns(box, session, turns)
        async with sessions.begin() as s:
            await truncate_from(s, workspaces, tenant, session, users[turns[0]])
        assert await _checkpoint_rows(sessions, tenant, session) == [(3, "", False)]
        assert await _files(box, session) == "*.txt="
        fresh = await box.call("write_sandbox_file", session=session, turn="req_new",
                               path="e.txt", content="new")  # fmt: skip
        assert fresh.success and fresh.data["checkpoint"] == 4, fresh
        assert await _files(box, session) == "e.txt=new"


async def test_deleting_the_last_turn_rolls_back_but_a_middle_turn_does_not(
    sessions: async_sessionmaker[AsyncSession], workspaces: SandboxWorkspaces, redis: Redis
) -> None:  # SPEC S-03, M-07
    tenant = f"tenant-{secrets.token_hex(4)}"
    turns = [f"req_{secrets.token_hex(6)}" for _ in range(3)]
    session, users = await _session(sessions, tenant, turns)
    async with open_sandbox(sessions, redis, tenant=tenant) as box:
        await _two_turns(box, session, turns)
        third = await box.call("write_sandbox_file", session=session, turn=turns[2],
                               path="c.txt", content="three")  # fmt: skip
        assert third.success, third
        async with sessions.begin() as s:
            await delete_turn(s, workspaces, tenant, session, users[turns[1]])
        assert await _files(box, session) == "a.txt=changed\nb.txt=two\nc.txt=three"
        async with sessions.begin() as s:
            await delete_turn(s, workspaces, tenant, session, users[turns[2]] + "a")
        assert await _files(box, session) == "a.txt=one"


async def test_a_rollback_numbers_after_a_checkpoint_stored_while_it_ran(
    sessions: async_sessionmaker[AsyncSession],
    workspaces: SandboxWorkspaces,
    redis: Redis,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # a sandbox replica took the next number between the rollback's read and insert
    tenant = f"tenant-{secrets.token_hex(4)}"
    turns = [f"req_{secrets.token_hex(6)}" for _ in range(2)]
    session, users = await _session(sessions, tenant, turns)
    async with open_sandbox(sessions, redis, tenant=tenant) as box:
        await _two_turns(box, session, turns)
        late = await box.call("shell_exec", session=session, turn=turns[1],
                              command="echo more >> b.txt")  # fmt: skip
        assert late.data["checkpoint"] == 3, late
        real_rows = workspace_checkpoints.rows
        reads = 0

        async def stale_first(s: AsyncSession, t: str, sid: str) -> list[CheckpointRow]:
            nonlocal reads
            reads += 1
            found = await real_rows(s, t, sid)
            return found[:-1] if reads == 1 else found  # the first read misses seq 3

        monkeypatch.setattr(workspace_checkpoints, "rows", stale_first)
        async with sessions.begin() as s:
            await truncate_from(s, workspaces, tenant, session, users[turns[1]])
        assert reads == 2
        assert await _checkpoint_rows(sessions, tenant, session) == [
            (1, turns[0], False), (4, turns[0], True),
        ]  # fmt: skip
        assert await _files(box, session) == "a.txt=one"


async def test_a_sandbox_that_cannot_answer_leaves_the_history_as_it_was(
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    """The order memory keeps (docs/memory.md): its rows are written in its open
    transaction, the sandbox is asked, then memory commits. A sandbox that does not answer
    rolls memory back: no fork session appears, no message is deleted (503, retry)."""
    tenant = f"tenant-{secrets.token_hex(4)}"
    turns = [f"req_{secrets.token_hex(6)}" for _ in range(2)]
    session, users = await _session(sessions, tenant, turns)
    down = SandboxWorkspaces(
        "http://sandbox", lambda: "unchecked", retry=RetryWindow(window_s=0),
        transport=httpx.MockTransport(lambda _: httpx.Response(502)),
    )  # fmt: skip
    with pytest.raises(HTTPException) as forked:
        async with sessions.begin() as s:
            await fork_session(s, down, await s.get_one(ChatSession, session), None)
    with pytest.raises(HTTPException) as rolled:
        async with sessions.begin() as s:
            await truncate_from(s, down, tenant, session, users[turns[0]])
    assert forked.value.status_code == rolled.value.status_code == 503
    async with sessions() as s:
        owned = await s.scalars(select(ChatSession.id).where(ChatSession.tenant_id == tenant))
        kept = await s.scalars(select(Message.id).where(Message.session_id == session))
        assert list(owned.all()) == [session] and len(kept.all()) == 4


async def test_the_sandbox_s_fork_is_idempotent_by_its_target_rows(
    sessions: async_sessionmaker[AsyncSession], workspaces: SandboxWorkspaces, redis: Redis
) -> None:
    """memory may ask again after a failure: the same fork answers the same count; a
    target that holds other rows is refused (never overwritten)."""
    tenant = f"tenant-{secrets.token_hex(4)}"
    turns = [f"req_{secrets.token_hex(6)}" for _ in range(2)]
    source, _ = await _session(sessions, tenant, turns)
    async with open_sandbox(sessions, redis, tenant=tenant) as box:
        await _two_turns(box, source, turns)
    target = f"ses_{secrets.token_hex(6)}"
    renamed = {turns[0]: "req_f0", turns[1]: "req_f1"}
    assert await workspaces.fork(tenant, source, target, renamed) == 2
    assert await workspaces.fork(tenant, source, target, renamed) == 2
    assert [r[1] for r in await _checkpoint_rows(sessions, tenant, target)] == list(
        renamed.values()
    )
    with pytest.raises(HTTPException) as other:
        await workspaces.fork(tenant, source, target, {turns[0]: "req_other"})
    assert other.value.status_code == 503 and "409" in str(other.value.detail)
