"""Hostile calls to the sandbox (SPEC S-01, S-02, S-05, T-14..T-16): each is refused or
bounded with a tool error the model can read, and the same worker serves the next call.

The real pieces run: bubblewrap, prlimit, the pids cgroup, git, PostgreSQL (checkpoints)
and Redis (call claims); only the bus is a recorder (tests/integration/sandbox_kit.py;
the path through Kafka and the engine: tests/integration/test_sandbox_turns.py).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from typing import Any

import pytest
from redis.asyncio import Redis
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from weft_sandbox.settings import MIB

from tests.integration.sandbox_kit import (
    DECOY,
    SENTINEL,
    WORKSPACE_BYTES,
    Sandbox,
    decoy,
    open_sandbox,
)


@pytest.fixture
async def sandbox(
    sessions: async_sessionmaker[AsyncSession], redis: Redis
) -> AsyncIterator[Sandbox]:
    async with open_sandbox(sessions, redis) as running:
        yield running


@pytest.mark.parametrize(
    ("tool", "arguments"),
    [
        ("read_file", {"path": "../../../../etc/passwd"}),
        ("read_file", {"path": "/etc/passwd"}),
        ("read_file", {"path": "/proc/self/root/etc/passwd"}),
        ("read_file", {"path": "/workspace/../etc/passwd"}),
        ("write_sandbox_file", {"path": "/tmp/evil", "content": "x"}),
        ("write_sandbox_file", {"path": "../outside", "content": "x"}),
        ("write_sandbox_file", {"path": "/workspace/input/planted", "content": "x"}),
        ("edit_sandbox_file", {"path": f"{DECOY}/hosts", "edits": [{"old_string": "d",
                                                                   "new_string": "b"}]}),
        ("list_sandbox_files", {"path": "/"}),
        ("shell_exec", {"command": "pwd", "work_dir": "/workspace/../.."}),
    ],
)  # fmt: skip
async def test_a_path_outside_the_workspace_is_refused(
    sandbox: Sandbox, tool: str, arguments: dict[str, Any]
) -> None:  # SPEC S-02, T-16
    hosts = decoy("hosts")
    done = await sandbox.call(tool, **arguments)
    assert hosts.read_text() == SENTINEL
    assert not done.success, done
    assert done.error and ("/workspace" in done.error or "read-only" in done.error), done.error
    await sandbox.still_serves()


async def test_a_symlink_planted_by_a_command_does_not_lead_out(sandbox: Sandbox) -> None:
    # SPEC S-02: the file tools run in the service, outside bubblewrap; they must not follow
    # a link a command made to a host file (the host's own root via /proc/self/root too).
    planted = await sandbox.call(
        "shell_exec",
        command="ln -s /etc/passwd pw && ln -s /proc/self/root/etc rootetc && ln -s / top",
    )
    assert planted.success, planted
    for path in ("pw", "rootetc/passwd", "/workspace/top/etc/passwd"):
        read = await sandbox.call("read_file", path=path)
        assert not read.success and "outside /workspace" in (read.error or ""), read
    write = await sandbox.call("write_sandbox_file", path="top/tmp/evil", content="x")
    assert not write.success and "outside /workspace" in (write.error or ""), write
    assert not os.path.exists("/tmp/evil")  # noqa: ASYNC240 (one stat, in a test)
    inside = await sandbox.call("shell_exec", command="cat /etc/passwd; ls /work 2>&1")
    assert "root:" not in inside.output and "No such file" in inside.output, inside.output
    await sandbox.still_serves()


async def test_the_second_guard_holds_when_the_path_check_is_bypassed(
    sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:  # SPEC S-02: O_NOFOLLOW behind the path check (a link swapped in after it)
    target = decoy("passwd")  # never the host's: this test runs with a guard bypassed
    await sandbox.call("shell_exec", command=f"ln -s {target} pw")
    space = sandbox.pool.get(sandbox.tenant, sandbox.session)
    assert space is not None
    monkeypatch.setattr(type(space), "host_path", lambda self, path, **_: self.work / path)
    read = await sandbox.call("read_file", path="pw")
    assert not read.success and "symbolic links" in (read.error or ""), read
    write = await sandbox.call("write_sandbox_file", path="pw", content="root::0:0::/:/bin/sh")
    assert not write.success and "symbolic links" in (write.error or ""), write
    assert target.read_text() == SENTINEL
    monkeypatch.undo()
    await sandbox.still_serves()


async def test_input_is_read_only_for_commands_too(sandbox: Sandbox) -> None:  # SPEC S-02
    done = await sandbox.call("shell_exec", command="touch /workspace/input/x")
    assert done.success and done.data["exit_code"] != 0 and "Read-only" in done.output, done


async def test_no_network_by_default(sandbox: Sandbox) -> None:  # SPEC S-05
    done = await sandbox.call(
        "shell_exec",
        command="python3 -c \"import socket; socket.create_connection(('1.1.1.1', 53), 3)\"; "
        "python3 -c \"import socket; socket.create_connection(('127.0.0.1', "
        f'{os.environ.get("WEFT_PG_PORT", "15432")}), 3)"',
        timeout_sec=30,
    )
    assert done.success, done
    assert "Network is unreachable" in done.output or "Connection refused" in done.output
    assert "Traceback" in done.output and done.data["exit_code"] != 0, done.output
    await sandbox.still_serves()


async def test_a_fork_bomb_hits_the_pid_limit(sandbox: Sandbox) -> None:  # SPEC S-05
    done = await sandbox.call(
        "shell_exec",
        command="bomb() { bomb | bomb & }; bomb; sleep 2; echo survived",
        timeout_sec=10,
    )
    # Bounded either way: the forks fail at the limit, or the timeout kills them all.
    assert done.data.get("duration_ms", 0) < 60_000, done
    refused = ("Cannot fork", "Resource temporarily unavailable")
    assert any(r in done.output for r in refused) or done.data["timed_out"], done
    await sandbox.still_serves()


async def test_a_disk_fill_stops_at_the_workspace_cap(sandbox: Sandbox) -> None:  # SPEC S-01
    done = await sandbox.call(
        "shell_exec", command="dd if=/dev/zero of=big bs=1M count=64; ls -l big", timeout_sec=60
    )
    assert done.success, done
    assert "No space left" in done.output or "File too large" in done.output, done.output
    listed = await sandbox.call("list_sandbox_files")
    assert listed.success
    sizes = [e["bytes"] for e in listed.data["entries"]]
    assert sum(sizes) <= WORKSPACE_BYTES, listed.output
    freed = await sandbox.call("shell_exec", command="rm -f big && echo freed")
    assert "freed" in freed.output
    await sandbox.still_serves()


async def test_without_a_tmpfs_the_checked_cap_undoes_the_call(sandbox: Sandbox) -> None:
    # SPEC S-01: where the service cannot mount (not root), the cap is checked after each
    # write call and a call that went over is undone (restored from the last checkpoint).
    sandbox.pool.quota = "checked"
    kept = await sandbox.call("write_sandbox_file", path="kept.txt", content="kept")
    assert kept.success and kept.data["checkpoint"] == 1, kept
    over = await sandbox.call(
        "shell_exec",
        command="dd if=/dev/zero of=big bs=1M count=9 2>/dev/null; echo kept >> kept.txt",
    )
    assert (
        not over.success and over.error and "over its" in over.error and "undone" in over.error
    ), over
    after = await sandbox.call("shell_exec", command="ls; cat kept.txt")
    assert "big" not in after.output and after.output.count("kept") == 2, after.output
    await sandbox.still_serves()


async def test_a_memory_bomb_fails_inside_the_sandbox(sandbox: Sandbox) -> None:  # SPEC S-05
    done = await sandbox.call(
        "shell_exec", command="python3 -c \"x = bytearray(2 * 1024**3); print('allocated')\"",
        timeout_sec=60,
    )  # fmt: skip
    assert done.success and "MemoryError" in done.output, done
    assert "allocated" not in done.output.split("stderr:")[0]
    await sandbox.still_serves()


async def test_an_output_flood_is_capped(sandbox: Sandbox) -> None:  # SPEC T-15
    done = await sandbox.call(
        "shell_exec",
        command="yes flood | head -c 5000000; yes err | head -c 3000000 >&2",
        max_output_bytes=1000,
        max_stderr_bytes=500,
    )
    assert done.success, done
    assert done.data["stdout_bytes"] == 5_000_000 and done.data["stdout_truncated"]
    stdout = done.output.split("stdout:\n", 1)[1].split("\n[truncated", 1)[0]
    assert len(stdout.encode()) == 1000
    assert done.data["stderr_truncated"] and "kept 500 of 3000000" in done.output
    too_much = await sandbox.call("shell_exec", command="true", max_output_bytes=65537)
    assert not too_much.success and "max_output_bytes" in (too_much.error or "")
    await sandbox.still_serves()


async def test_a_command_ignoring_sigterm_is_killed(sandbox: Sandbox) -> None:  # SPEC T-15
    done = await sandbox.call(
        "shell_exec",
        command="trap '' TERM; (trap '' TERM; setsid sleep 300 &); echo started; sleep 300",
        timeout_sec=2,
    )
    assert not done.success and done.data["timed_out"], done
    assert "timeout" in (done.error or "") and "started" in done.output
    ps = await sandbox.call("shell_exec", command="ps -e -o comm= | grep -c sleep || true")
    assert ps.output.split("stdout:\n")[1].startswith("0"), ps.output  # none left behind
    await sandbox.still_serves()


async def test_another_tenants_session_id_names_another_workspace(sandbox: Sandbox) -> None:
    # SPEC S-01: identity is the envelope's tenant and session; the same session id in
    # another tenant is a different, empty workspace.
    written = await sandbox.call("write_sandbox_file", path="secret.txt", content="mine")
    assert written.success, written
    other = await sandbox.call("read_file", tenant="tenant-other", path="secret.txt")
    assert not other.success and "not found" in (other.error or ""), other
    listing = await sandbox.call("shell_exec", tenant="tenant-other", command="ls -A /workspace")
    assert "secret" not in listing.output
    mine = await sandbox.call("read_file", path="secret.txt")
    assert mine.success and mine.output == "mine"


async def test_bad_arguments_are_readable_errors(sandbox: Sandbox) -> None:  # SPEC T-02
    cases: list[tuple[str, dict[str, Any], str]] = [
        ("shell_exec", {"command": "true", "timeout_sec": 601}, "timeout_sec"),
        ("shell_exec", {"command": "true", "stdin": "x" * 65537}, "stdin"),
        ("shell_exec", {"command": "true", "env": {"BAD NAME": "x"}}, "env name"),
        ("shell_exec", {"command": "true", "skill_name": "pdf"}, "skill 'pdf' not found"),
        ("write_sandbox_file", {"path": "big", "content": "x" * (8 * MIB + 1)}, "content"),
        ("read_file", {"path": "skill://pdf/SKILL.md"}, "skill 'pdf' not found"),
    ]
    for tool, arguments, fragment in cases:
        done = await sandbox.call(tool, **arguments)
        assert not done.success and fragment in (done.error or ""), (tool, done.error)
    await sandbox.still_serves()
