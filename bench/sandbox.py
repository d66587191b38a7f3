"""The sandbox service through Kafka, as the engine drives it.

Starts one ``python -m weft_sandbox`` replica on fresh topics (real Kafka, PostgreSQL,
Redis; the local backend: bubblewrap, prlimit, a pids cgroup, a tmpfs per workspace when
root) and publishes ``ToolCallRequested`` records on ``weft.sandbox.calls.v1`` signed
like a turn's, then waits for each ``tool.results`` record:

1. ``cold``: the first ``shell_exec echo`` of ``--cold`` new sessions, one after
   another (workspace, tmpfs mount, checkpoint lookup, bubblewrap, the command);
2. ``warm``: ``--warm`` ``shell_exec echo`` calls of one session, one after another
   (``echo`` changes nothing, so no checkpoint is written: the floor of a call);
3. ``concurrent``: ``--sessions`` new sessions sent at once, each writing a 1 MiB
   deliverable and sleeping (``--concurrency`` run at a time, the replica's
   ``WEFT_SANDBOX_CONCURRENCY``), and the memory of the replica's whole process tree (RSS
   and PSS summed over the service and every process under it) at the peak and once all
   their workspaces are live, plus the tmpfs pages those workspaces hold.

Latencies are publish -> result (Kafka both ways); ``worker_ms`` is the duration the
replica reports for the same calls. Prints and writes ``bench/results/sandbox.json`` with
the load average before and after.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from weft_testkit.credentials import credentials_dir
from weft_testkit.kafka import principal_env
from weft_testkit.stack import create_topics, delete_topics, free_port, infra_env
from weft_testkit.tool_workers import ToolCallClient

from bench.benchlib import machine, save, summary

REPO = Path(__file__).resolve().parents[1]


async def _call(
    calls: ToolCallClient, session: str, command: str, timeout_s: float = 120
) -> tuple[float, int]:
    """One ``shell_exec`` and its result: (publish -> result ms, the worker's duration ms)."""
    started = time.perf_counter()
    call_id = await calls.send("shell_exec", {"command": command}, session=session, deadline_s=300)
    await calls.wait_for([call_id], timeout_s)
    [data] = calls.results[call_id]
    if not data["success"]:
        raise RuntimeError(f"call failed: {data.get('error')}")
    return (calls.arrived[call_id] - started) * 1000, int(data["duration_ms"])


def _start_replica(
    prefix: str, concurrency: int, log_dir: Path
) -> tuple[int, subprocess.Popen[bytes]]:
    port = free_port()
    root = Path(tempfile.mkdtemp(prefix="weft-sandbox-bench-"))
    root.chmod(0o755)
    env = {
        **os.environ, **principal_env(infra_env(), "weft-sandbox"), "PYTHONUNBUFFERED": "1",
        "WEFT_HTTP_PORT": str(port), "WEFT_METRICS_PORT": "0", "WEFT_TOPIC_PREFIX": prefix,
        "WEFT_INSTANCE_ID": f"sandbox-bench-{port}", "WEFT_LOG_FORMAT": "json",
        "WEFT_CREDENTIALS_DIR": str(credentials_dir()), "WEFT_SANDBOX_ROOT": str(root),
        "WEFT_SANDBOX_CONCURRENCY": str(concurrency),
    }  # fmt: skip
    log = open(log_dir / f"{prefix}sandbox.log", "ab")  # noqa: SIM115
    process = subprocess.Popen(
        [sys.executable, "-m", "weft_sandbox"], env=env, stdout=log, stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip
    # 50 consumers joining one group take a while on a loaded machine.
    deadline = time.monotonic() + 420
    with httpx.Client(timeout=3) as client:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(f"the sandbox replica exited; see {log_dir}")
            try:
                if client.get(f"http://127.0.0.1:{port}/readyz").status_code == 200:
                    return port, process
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
    process.terminate()
    process.wait(timeout=30)
    raise RuntimeError("the sandbox replica was not ready in time")


def _stop_replica(process: subprocess.Popen[bytes], prefix: str) -> None:
    """Stop a replica of :func:`_start_replica` (SIGTERM, then SIGKILL after 30 s) and
    delete its topics."""
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
    delete_topics(prefix)


def _tree(pid: int) -> list[int]:
    """``pid`` and every process below it."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(parent, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        here = todo.pop()
        found.append(here)
        todo += children.get(here, [])
    return found


def _memory_kib(pids: list[int]) -> dict[str, int]:
    rss = pss = 0
    for pid in pids:
        try:
            rollup = Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()
        except OSError:
            continue
        for line in rollup:
            name, _, value = line.partition(":")
            if name == "Rss":
                rss += int(value.split()[0])
            elif name == "Pss":
                pss += int(value.split()[0])
    return {"rss_kib": rss, "pss_kib": pss, "processes": len(pids)}


def _tmpfs_kib(root_hint: str) -> int:
    used = 0
    for line in Path("/proc/mounts").read_text().splitlines():
        _, mount, kind = line.split()[:3]
        if kind == "tmpfs" and root_hint in mount:
            stats = os.statvfs(mount)
            used += (stats.f_blocks - stats.f_bfree) * stats.f_frsize // 1024
    return used


async def _concurrent(
    calls: ToolCallClient, pid: int, sessions: int, sleep_s: float
) -> dict[str, Any]:
    """``sessions`` new sessions at once, each writing a 1 MiB deliverable then sleeping;
    the replica's memory at the peak of running commands and once every workspace is
    live (the replica keeps them until their idle TTL)."""
    base = _memory_kib(_tree(pid))
    names = [f"conc-{i}-{secrets.token_hex(3)}" for i in range(sessions)]
    command = f"head -c 1048576 /dev/zero > output/blob; sleep {sleep_s}; echo done"
    started = time.perf_counter()
    ids = [
        await calls.send("shell_exec", {"command": command}, session=name, deadline_s=300)
        for name in names
    ]
    peak: dict[str, int] = {}
    running_peak = 0
    done = asyncio.create_task(calls.wait_for(ids, timeout_s=600))
    while not done.done():
        tree = _tree(pid)
        sleeping = sum(1 for p in tree if _comm(p) == "sleep")
        memory = _memory_kib(tree)
        if memory["pss_kib"] >= peak.get("pss_kib", 0):
            peak = {**memory, "commands_running": sleeping}
        running_peak = max(running_peak, sleeping)
        await asyncio.sleep(0.2)
    await done
    wall_s = time.perf_counter() - started
    failed = [c for c in ids if not calls.results[c][0]["success"]]
    live = {**_memory_kib(_tree(pid)), "tmpfs_kib": _tmpfs_kib("weft-sandbox-bench-")}
    return {
        "sessions": sessions,
        "most_commands_running_at_once": running_peak,
        "failed": len(failed),
        "wall_s": round(wall_s, 1),
        "idle_replica": base,
        "peak_while_running": peak,
        f"{sessions}_workspaces_live": live,
        "per_workspace_kib": round(
            (live["pss_kib"] - base["pss_kib"] + live["tmpfs_kib"]) / sessions
        ),
    }


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


async def run(args: argparse.Namespace) -> dict[str, Any]:
    log_dir = REPO / ".weft" / "logs" / "bench-sandbox"
    log_dir.mkdir(parents=True, exist_ok=True)
    prefix = f"sb{secrets.token_hex(4)}."
    create_topics(prefix, 6)
    before = machine()
    _, process = _start_replica(prefix, args.concurrency, log_dir)
    try:
        async with ToolCallClient(prefix, sandbox=True) as calls:
            await _call(calls, f"warmup-{secrets.token_hex(3)}", "echo warm")  # group joined
            cold, cold_worker = [], []
            for _ in range(args.cold):
                total, worker = await _call(calls, f"cold-{secrets.token_hex(4)}", "echo hi")
                cold.append(total)
                cold_worker.append(worker)
            session = f"warm-{secrets.token_hex(4)}"
            await _call(calls, session, "echo first")
            warm, warm_worker = [], []
            for _ in range(args.warm):
                total, worker = await _call(calls, session, "echo hi")
                warm.append(total)
                warm_worker.append(worker)
            concurrent = await _concurrent(calls, process.pid, args.sessions, args.sleep_s)
    finally:
        _stop_replica(process, prefix)
    return {
        "machine_before": before, "machine_after": machine(),
        "cold_first_call_ms": {**summary(cold, (0.5, 0.9)),
                               "worker_ms": summary([float(w) for w in cold_worker], (0.5,))},
        "warm_shell_exec_echo_ms": {**summary(warm),
                                    "worker_ms": summary([float(w) for w in warm_worker])},
        "concurrent": concurrent,
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cold", type=int, default=20, help="new sessions, first call each")
    parser.add_argument("--warm", type=int, default=200, help="calls of one session")
    parser.add_argument("--sessions", type=int, default=50, help="sessions sent at once")
    parser.add_argument("--sleep-s", type=float, default=1.0, help="each of their commands")
    parser.add_argument(
        "--concurrency", type=int, default=4, help="WEFT_SANDBOX_CONCURRENCY of the replica"
    )
    save("sandbox", asyncio.run(run(parser.parse_args())))


if __name__ == "__main__":
    main()
