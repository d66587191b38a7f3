"""A session's workspace survives its replica (SPEC S-03, S-05): each change is a git
checkpoint in PostgreSQL, and a replica that does not hold the session, or holds an older
copy, restores the newest before the call runs. Two in-process replicas on the real
PostgreSQL and Redis, with the real local backend (tests/integration/sandbox_kit.py)."""

from __future__ import annotations

import secrets
from datetime import UTC, datetime, timedelta

import pytest
from redis.asyncio import Redis
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from weft_contracts import ToolCallRequested, ToolCallRequestedData, ToolContext
from weft_sandbox.checkpoints import CheckpointStore

from tests.integration.sandbox_kit import TOOLS, open_sandbox


async def test_a_replica_without_the_session_restores_its_newest_checkpoint(
    sessions: async_sessionmaker[AsyncSession], redis: Redis
) -> None:  # SPEC S-03
    tenant, session = f"tenant-{secrets.token_hex(4)}", f"session-{secrets.token_hex(4)}"
    async with (
        open_sandbox(sessions, redis, tenant=tenant, session=session) as a,
        open_sandbox(sessions, redis, tenant=tenant, session=session) as b,
    ):
        wrote = await a.call("write_sandbox_file", path="notes/plan.md", content="step one\n")
        assert wrote.success and wrote.data["checkpoint"] == 1, wrote
        ran = await a.call("shell_exec", command="echo result > output/report.txt")
        assert ran.success and ran.data["checkpoint"] == 2, ran
        same = await a.call("shell_exec", command="cat notes/plan.md")  # nothing changed
        assert "checkpoint" not in same.data

        read = await b.call("read_file", path="/workspace/output/report.txt")
        assert read.success and read.output == "result\n", read
        edited = await b.call(
            "edit_sandbox_file", path="notes/plan.md",
            edits=[{"old_string": "one", "new_string": "two"}],
        )  # fmt: skip
        assert edited.success and edited.data["checkpoint"] == 3, edited

        stale = await a.call("read_file", path="notes/plan.md")  # a's copy is at 2
        assert stale.output == "step two\n", stale
        owner = await a.call("shell_exec", command="stat -c %u notes/plan.md; id -u")
        file_uid, own_uid = owner.output.split("stdout:\n")[1].split()[:2]
        assert file_uid == own_uid, owner.output  # restored files belong to the sandbox

    async with sessions() as db:
        rows = (
            await db.execute(
                text(
                    "SELECT seq, bundle IS NOT NULL, request_id FROM sandbox_checkpoints "
                    "WHERE tenant_id = :t AND session_id = :s ORDER BY seq"
                ),
                {"t": tenant, "s": session},
            )
        ).all()
    assert [(r[0], r[1]) for r in rows] == [(1, False), (2, False), (3, True)]
    assert {r[2] for r in rows} == {"r1"}


async def test_an_idle_workspace_is_reaped_and_comes_back(
    sessions: async_sessionmaker[AsyncSession], redis: Redis
) -> None:  # SPEC S-05
    async with open_sandbox(sessions, redis) as box:
        await box.call("write_sandbox_file", path="kept.txt", content="kept")
        assert len(box.pool) == 1
        assert box.host.reap(ttl_s=3600) == 0  # used just now
        assert box.host.reap(ttl_s=0) == 1
        assert len(box.pool) == 0 and not any(box.pool.root.iterdir())
        back = await box.call("read_file", path="kept.txt")
        assert back.success and back.output == "kept", back


async def test_a_purged_sessions_copies_are_dropped_and_its_files_never_come_back(
    sessions: async_sessionmaker[AsyncSession], redis: Redis
) -> None:  # tenant and user deletion: nothing of the session left on a replica
    tenant, session = f"tenant-{secrets.token_hex(4)}", f"session-{secrets.token_hex(4)}"
    async with (
        open_sandbox(sessions, redis, tenant=tenant, session=session) as a,
        open_sandbox(sessions, redis, tenant=tenant, session=session) as b,
    ):
        await a.call("write_sandbox_file", path="secret.txt", content="payroll")
        assert (await b.call("read_file", path="secret.txt")).output == "payroll"
        kept = await a.call("write_sandbox_file", path="x.txt", content="x", session="kept")
        assert kept.success, kept
        async with sessions.begin() as db:  # what the purge does to this session's rows
            await db.execute(
                text("DELETE FROM sandbox_checkpoints WHERE tenant_id = :t AND session_id = :s"),
                {"t": tenant, "s": session},
            )
        assert await a.host.reap_purged() == 1  # the other session's copy stays
        assert [s.session_id for s in a.pool.idle(0)] == ["kept"]
        # b still holds its copy (its reaper has not run): the next call starts afresh.
        gone = await b.call("read_file", path="secret.txt")
        assert not gone.success and "payroll" not in gone.output, gone


async def test_a_redelivered_write_call_is_not_run_again(
    sessions: async_sessionmaker[AsyncSession], redis: Redis
) -> None:  # invariant 3
    async with open_sandbox(sessions, redis) as box:
        call = ToolCallRequested(
            tenant_id=box.tenant, session_id=box.session, request_id="r1",
            data=ToolCallRequestedData(
                call_id=f"call_{secrets.token_hex(6)}", tool_name="shell_exec",
                arguments={"command": "echo x >> counter"}, round=0,
                deadline=datetime.now(UTC) + timedelta(seconds=60),
                context=ToolContext(user_id="u", agent_id="a", allowed_tools=TOOLS),
            ),
        )  # fmt: skip
        await box.worker.handle(call)
        await box.worker.handle(call)
        assert len(box.bus.published) == 1
        count = await box.call("read_file", path="counter")
        assert count.output == "x\n"


async def test_a_call_id_the_model_reuses_in_a_later_turn_runs_again(
    sessions: async_sessionmaker[AsyncSession], redis: Redis
) -> None:  # invariant 3: the claim is the turn's call (models reuse ids such as call_0)
    async with open_sandbox(sessions, redis) as box:
        for turn in ("r1", "r2"):
            call = ToolCallRequested(
                tenant_id=box.tenant, session_id=box.session, request_id=turn,
                data=ToolCallRequestedData(
                    call_id="call_run", tool_name="shell_exec",
                    arguments={"command": "echo x >> counter"}, round=0,
                    deadline=datetime.now(UTC) + timedelta(seconds=60),
                    context=ToolContext(user_id="u", agent_id="a", allowed_tools=TOOLS),
                ),
            )  # fmt: skip
            await box.worker.handle(call)
        assert len(box.bus.published) == 2
        count = await box.call("read_file", path="counter")
        assert count.output == "x\nx\n"


async def test_a_call_that_could_not_get_its_workspace_runs_when_redelivered(
    sessions: async_sessionmaker[AsyncSession], redis: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:  # invariant 3, STYLE principle 4: infrastructure failures raise, then retry
    async with open_sandbox(sessions, redis) as box:
        call = ToolCallRequested(
            tenant_id=box.tenant, session_id=box.session, request_id="r1",
            data=ToolCallRequestedData(
                call_id=f"call_{secrets.token_hex(6)}", tool_name="write_sandbox_file",
                arguments={"path": "a.txt", "content": "a"}, round=0,
                deadline=datetime.now(UTC) + timedelta(seconds=60),
                context=ToolContext(user_id="u", agent_id="a", allowed_tools=TOOLS),
            ),
        )  # fmt: skip

        async def down(*_: object) -> int:
            raise ConnectionError("postgres is down")

        monkeypatch.setattr(CheckpointStore, "latest_seq", down)
        with pytest.raises(ConnectionError):
            await box.worker.handle(call)
        assert box.bus.published == []
        monkeypatch.undo()
        await box.worker.handle(call)  # the redelivery
        assert box.bus.published[-1][1].data.success, box.bus.published[-1][1]


async def test_read_file_pages_by_lines(
    sessions: async_sessionmaker[AsyncSession], redis: Redis
) -> None:  # SPEC T-14
    async with open_sandbox(sessions, redis) as box:
        await box.call("shell_exec", command="seq 1 5000 > lines.txt")
        first = await box.call("read_file", path="lines.txt")
        assert first.data["lines"] == 2000 and first.data["next_offset"] == 2001
        assert first.output.startswith("1\n2\n") and "offset=2001" in first.output
        last = await box.call("read_file", path="lines.txt", offset=4999, limit=10)
        assert last.output == "4999\n5000\n" and last.data["next_offset"] is None
        small = await box.call("read_file", path="lines.txt", max_bytes=10)
        assert small.data["lines"] == 5 and small.data["next_offset"] == 6
        await box.call(
            "shell_exec", command="head -c 100 /dev/urandom > blob; printf 'a\\0b' >> blob"
        )
        binary = await box.call("read_file", path="blob")
        assert not binary.success and "binary" in (binary.error or "")
