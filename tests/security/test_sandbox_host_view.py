"""What a sandboxed command can see of the host (SPEC S-01, S-05), sent as a model would
send it, through the public API on the real stack: ``/proc`` inside the jail names no host
path of the session's workspace and no process outside the jail, and a command that leaves
a background process behind is killed whole at its timeout.

The host processes these tests look for are decoys the test starts itself, each with a
marker of its own in its argv.
"""

from __future__ import annotations

import re
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
from weft_sandbox.workspace import workspace_key
from weft_testkit import LocalStack

from tests.e2e.sandbox_helpers import sandbox_session, scripted_turn
from tests.stack_fixtures import weft_home

PROC_LOOK = (
    "for f in /proc/[0-9]*/cmdline; do echo \"$f: $(tr '\\0' ' ' < $f)\"; done; "
    "echo '--- pid 1'; tr '\\0' ' ' < /proc/1/cmdline; echo; tr '\\0' ' ' < /proc/1/environ; "
    "echo; echo '--- ls'; ls /proc; "
    "echo '--- mountinfo'; cat /proc/self/mountinfo; "
    "echo '--- links'; ls -l /proc/[0-9]*/cwd /proc/[0-9]*/root /proc/[0-9]*/exe "
    "/proc/[0-9]*/fd/ 2>&1; cat /proc/self/cgroup"
)


def host_cmdlines() -> list[str]:
    """The argv of every process of the host, as the host sees them."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                found.append((entry / "cmdline").read_bytes().replace(b"\0", b" ").decode())
            except OSError:
                continue  # it ended meanwhile
    return found


@contextmanager
def decoy_process() -> Iterator[str]:
    """A host process (not in any sandbox) whose argv carries a unique marker."""
    marker = f"weft-host-decoy-{secrets.token_hex(6)}"
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", marker])
    try:
        # The host does list it, once the child has exec'd (until then its cmdline is
        # still its parent's: CI once looked too early).
        deadline = time.monotonic() + 15
        while not any(marker in c for c in host_cmdlines()):
            assert time.monotonic() < deadline, "the decoy never showed on the host"
            time.sleep(0.05)
        yield marker
    finally:
        proc.kill()
        proc.wait()


def workspace_on_host(stack: LocalStack, session_id: str) -> Path:
    """The host folder the sandbox service mounts as the session's ``/workspace``."""
    root = weft_home() / "sandbox" / f"sandbox-{stack.ports['sandbox'][0]}"
    return root / workspace_key(stack.tenant, session_id) / "ws"


async def test_proc_in_the_jail_shows_no_host_path_and_no_host_process(
    api: httpx.AsyncClient, stack: LocalStack, llm: httpx.AsyncClient
) -> None:
    sid = await sandbox_session(api, "proc-looker")
    with decoy_process() as marker:
        results, _ = await scripted_turn(api, stack.api_key, llm, sid, "PROC-LOOK", [
            {"id": "call_mark", "name": "write_sandbox_file",
             "arguments": {"path": "here.txt", "content": "the workspace"}},
            {"id": "call_look", "name": "shell_exec",
             "arguments": {"command": PROC_LOOK, "max_output_bytes": 65536}},
        ])  # fmt: skip
    host_ws = workspace_on_host(stack, sid)
    assert (host_ws / "here.txt").is_file()  # the host path below is the real one
    look = results["call_look"]
    assert look["success"], look
    seen = look["output"]
    assert re.search(r"^\d+ \d+ \S+ \S+ /workspace rw", seen, re.M), seen  # mountinfo
    # Neither the workspace's host folder nor any part of the path that leads to it.
    for leak in (str(host_ws), host_ws.parent.name, str(host_ws.parents[1]),
                 str(weft_home())):  # fmt: skip
        assert leak not in seen, (leak, seen)
    assert marker not in seen, seen
    assert "weft-bwrap-args" not in seen, seen  # bubblewrap's options are not left open
    assert "bwrap --args" in seen, seen  # bubblewrap is the jail's pid 1
    pids = [int(n) for n in seen.rsplit("--- ls", 1)[1].split("--- mountinfo")[0].split()
            if n.isdigit()]  # fmt: skip
    # bubblewrap (1), the command's sh and the few commands it runs: nothing of the host's.
    assert 0 < len(pids) <= 6 and max(pids) < 50, pids


async def test_a_timeout_kills_a_background_process_the_command_left(
    api: httpx.AsyncClient, stack: LocalStack, llm: httpx.AsyncClient
) -> None:
    suffix = secrets.token_hex(6)
    marker = f"weft-jail-decoy-{suffix}"
    # setsid: out of the command's process group and session; SIGTERM ignored. The marker
    # is put together in the jail, so only that process's argv carries it whole. 10 s: a
    # loaded CI machine once took more than 3 s to start python3 in the jail.
    command = (
        "P=weft-jail-decoy; setsid python3 -c 'import signal, time; signal.signal("
        f'signal.SIGTERM, signal.SIG_IGN); time.sleep(300)\' "$P-{suffix}" & '
        "until tr '\\0' ' ' < /proc/$!/cmdline | grep -q \"$P-\"; do sleep 0.1; done; "
        "tr '\\0' ' ' < /proc/$!/cmdline; echo; sleep 300"
    )
    assert marker not in command
    sid = await sandbox_session(api, "leaver")
    with decoy_process() as host_marker:
        results, _ = await scripted_turn(api, stack.api_key, llm, sid, "LEAVE-BEHIND", [
            {"id": "call_leave", "name": "shell_exec",
             "arguments": {"command": command, "timeout_sec": 10}},
        ])  # fmt: skip
        after = host_cmdlines()
        assert any(host_marker in c for c in after)  # the scan does see host processes
    left = results["call_leave"]
    shown = f"{left.get('error')}{left.get('output')}"
    assert not left["success"] and "timeout and was stopped" in shown, left
    assert marker in shown, left  # it ran in the jail, under that argv
    assert not [c for c in after if marker in c], "the background process outlived the call"
