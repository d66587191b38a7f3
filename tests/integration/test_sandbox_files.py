"""A session's files from outside a turn (SPEC S-01, S-03): an attachment uploaded on one
replica is checkpointed and seen by a call on another; a call reports the deliverables
it added or changed under /workspace/output; listing and download serve the newest
checkpoint and never a link out; an upload and a call of one session on two replicas
never hold the workspace at once (one checkpoint number each). In-process replicas on the
real PostgreSQL and Redis with the real local backend (tests/integration/sandbox_kit.py)."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Callable

import pytest
from redis.asyncio import Redis
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from weft_sandbox.session_files import FileRefused, SessionFiles
from weft_sandbox.session_lock import WorkspaceBusy
from weft_sandbox.workspace import Workspace

from tests.integration.sandbox_kit import open_sandbox

CSV = b"city,sales\nOslo,3\nLima,5\n"


def _ids() -> tuple[str, str]:
    return f"tenant-{secrets.token_hex(4)}", f"session-{secrets.token_hex(4)}"


async def test_an_upload_on_one_replica_is_seen_by_a_call_on_another(
    sessions: async_sessionmaker[AsyncSession], redis: Redis
) -> None:
    tenant, session = _ids()
    async with (
        open_sandbox(sessions, redis, tenant=tenant, session=session) as a,
        open_sandbox(sessions, redis, tenant=tenant, session=session) as b,
    ):
        wrote = await a.call("write_sandbox_file", path="notes.md", content="x\n")
        assert wrote.data["checkpoint"] == 1, wrote
        stored = await SessionFiles(b.host).upload(tenant, session, "data.csv", CSV)
        assert (stored.path, stored.size, stored.checkpoint) == ("input/data.csv", len(CSV), 2)

        read = await a.call("read_file", path="attachment://data.csv")  # a restores 2
        assert read.success and read.output == CSV.decode(), read
        ran = await a.call(
            "shell_exec",
            command="awk -F, 'NR>1 {s+=$2} END {print \"total\", s}' input/data.csv "
            "> output/report.md; echo nope > input/data.csv",
        )
        assert ran.success and "exit_code: 0" not in ran.output, ran  # input is read-only
        assert ran.data["checkpoint"] == 3
        assert ran.data["deliverables"] == [{"path": "output/report.md", "size": 8}], ran.data

        listed = await SessionFiles(b.host).list(tenant, session, "output")  # b restores 3
        assert [(f.name, f.path, f.size) for f in listed] == [("report.md", "output/report.md", 8)]
        name, data = await SessionFiles(b.host).read(tenant, session, "output/report.md")
        assert (name, data) == ("report.md", b"total 8\n")
        assert (await SessionFiles(b.host).read(tenant, session, "input/data.csv"))[1] == CSV
    async with sessions() as db:
        rows = (
            await db.execute(
                text(
                    "SELECT seq, request_id FROM sandbox_checkpoints "
                    "WHERE tenant_id = :t AND session_id = :s ORDER BY seq"
                ),
                {"t": tenant, "s": session},
            )
        ).all()
    assert [r[1] for r in rows] == ["r1", "upload", "r1"]


async def test_only_added_or_changed_regular_output_files_are_deliverables(
    sessions: async_sessionmaker[AsyncSession], redis: Redis
) -> None:
    async with open_sandbox(sessions, redis) as box:
        first = await box.call(
            "shell_exec",
            command="mkdir -p output/sub; printf ab > output/a.txt; printf c > output/sub/b.md;"
            " printf w > work.txt; ln -s /etc/passwd output/passwd",
        )
        assert sorted(d["path"] for d in first.data["deliverables"]) == [
            "output/a.txt", "output/sub/b.md"
        ], first.data  # fmt: skip
        again = await box.call("shell_exec", command="printf ab > output/a.txt; rm output/sub/b.md")
        assert "deliverables" not in again.data, again.data  # same content, a deletion
        changed = await box.call("write_sandbox_file", path="output/a.txt", content="abc")
        assert changed.data["deliverables"] == [{"path": "output/a.txt", "size": 3}]
        outside = await box.call("shell_exec", command="echo z > work.txt")
        assert "deliverables" not in outside.data


async def test_listing_and_download_never_serve_a_link_out_or_a_path_escape(
    sessions: async_sessionmaker[AsyncSession], redis: Redis
) -> None:
    async with open_sandbox(sessions, redis) as box:
        files = SessionFiles(box.host)
        planted = await box.call(
            "shell_exec",
            command="echo ok > output/real.md; ln -s /etc/passwd output/passwd;"
            " ln -s ../input output/in; ln -s / output/root; echo w > work.txt",
        )
        assert planted.success, planted
        listed = await files.list(box.tenant, box.session, "output")
        assert [f.name for f in listed] == ["real.md"]
        for path, status in [
            ("output/passwd", 404), ("output/root/etc/passwd", 404), ("output/in/x", 404),
            ("output/../work.txt", 422), ("/etc/passwd", 422), ("work.txt", 404),
            ("output/a\x00b", 422), ("output", 404), ("output/", 422),
        ]:  # fmt: skip
            with pytest.raises(FileRefused) as refused:
                await files.read(box.tenant, box.session, path)
            assert refused.value.status == status, (path, refused.value.reason)
        for bad in ["../x", "a/b", "..", ".", "", "a\x00b", "a\nb", " lead", "a\\b"]:
            with pytest.raises(FileRefused) as refused:
                await files.upload(box.tenant, box.session, bad, b"x")
            assert refused.value.status == 422, bad
        await box.still_serves()


async def test_an_upload_waits_for_a_running_call_of_the_session_on_another_replica(
    sessions: async_sessionmaker[AsyncSession], redis: Redis
) -> None:
    tenant, session = _ids()
    async with (
        open_sandbox(sessions, redis, tenant=tenant, session=session) as a,
        open_sandbox(sessions, redis, tenant=tenant, session=session, lock_wait_s=0.5) as b,
    ):
        gate = "/workspace/output/go"
        running = asyncio.create_task(
            a.call("shell_exec", command=f"while [ ! -e {gate} ]; do sleep 0.05; done; "
                   "echo done > output/slow.md")
        )  # fmt: skip
        await _until(lambda: _busy(a.host.pool.get(tenant, session)))
        with pytest.raises(WorkspaceBusy):  # the other replica's change holds the session
            await SessionFiles(b.host).upload(tenant, session, "late.csv", CSV)
        space = a.host.pool.get(tenant, session)
        assert space is not None
        (space.work / "output" / "go").write_text("")
        ran = await running
        assert ran.success and ran.data["checkpoint"] == 1, ran
        stored = await SessionFiles(b.host).upload(tenant, session, "late.csv", CSV)
        assert stored.checkpoint == 2  # after the call's, never a second checkpoint 1


def _busy(space: Workspace | None) -> bool:
    return space is not None and space.lock.locked()


async def _until(condition: Callable[[], bool]) -> None:
    """Wait up to 30 s for ``condition`` (the caller asserts what it needs after)."""
    for _ in range(600):
        if condition():
            return
        await asyncio.sleep(0.05)
