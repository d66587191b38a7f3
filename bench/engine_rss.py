"""The engine's idle memory: what one replica holds before it runs a turn (issue 38).

Two measures, each over ``--runs`` fresh processes (the median is reported):

- ``process``: ``python -m weft_engine`` started the way the test stack starts it
  (``LocalStack.service_env``: its own topic prefix, the shared Kafka, PostgreSQL and
  Redis), but with ``Popen`` (a process forked from the test harness's fork server would
  carry every service's imports). Once ``/readyz`` answers, the bench reads ``VmRSS`` from
  ``/proc/<pid>/status``, lets the replica idle for ``--idle`` seconds and reads it again
  (the number reported), and lists the tool libraries' native extensions mapped into it
  (``/proc/<pid>/maps``).
- ``import``: a fresh interpreter imports ``weft_engine.app`` and builds the app (nothing
  connects before the lifespan starts): its RSS and which heavy libraries are in
  ``sys.modules``.

It also reports the install footprint of the engine and of the other services that need
the tool catalog but not the implementations: the distributions each needs (its
dependency closure, what its image installs) and their size on disk.

    .venv/bin/python bench/engine_rss.py --runs 3 --label after
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path
from typing import Any

from benchlib import machine, save
from weft_platform.credentials import ensure_dev_keys
from weft_platform.runtime import DEV_ISSUERS
from weft_testkit.stack import (
    SERVICES,
    LocalStack,
    StackConfig,
    create_topics,
    delete_topics,
    free_port,
    wait_ready,
)

HEAVY = (
    "duckdb", "numpy", "pypdf", "openpyxl", "sqlglot", "bs4", "markdownify", "mcp",
    "snowballstemmer", "weft_tools", "weft_tool_catalog",
)  # fmt: skip
"""Top-level modules whose presence the import measure reports."""

NATIVE = ("duckdb", "numpy", "_multiarray", "openpyxl", "lxml")
"""Substrings of mapped shared objects that mean a tool library's native code is loaded."""

_IMPORT_PROBE = f"""
import json, resource, sys
from weft_engine.app import create_app
create_app()
rss_kib = next(int(line.split()[1]) for line in open("/proc/self/status")
               if line.startswith("VmRSS:"))
loaded = sorted({{m.split(".")[0] for m in sys.modules}} & set({HEAVY!r}))
print(json.dumps({{"rss_kib": rss_kib, "modules": len(sys.modules), "heavy": loaded}}))
"""


def _status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} for {pid}")


def _native(pid: int) -> list[str]:
    mapped = {line.split()[-1] for line in Path(f"/proc/{pid}/maps").read_text().splitlines()
              if line.endswith(".so") or ".so." in line}  # fmt: skip
    return sorted({Path(p).name for p in mapped if any(n in p for n in NATIVE)})


def _start(stack: LocalStack, name: str, log_dir: Path) -> subprocess.Popen[bytes]:
    port = stack.ports[name][0]
    with open(log_dir / f"{name}.log", "ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", f"weft_{name}"], env=stack.service_env(name, port),
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True,
        )  # fmt: skip


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()


def measure_process(idle_s: float) -> dict[str, Any]:
    """One engine process, started like the test stack's: its RSS once ready and idle.
    Memory runs next to it (the engine is ready once its first turn audit, which asks
    memory, has passed); no other service is started."""
    log_dir = Path(tempfile.mkdtemp(prefix="weft-engine-rss-"))
    stack = LocalStack(StackConfig(log_dir=log_dir))
    ensure_dev_keys(stack.credentials_dir, DEV_ISSUERS)
    for name in ("scripted_llm", *SERVICES):  # peers' URLs; only memory is started
        stack.ports[name] = [free_port()]
    create_topics(stack.prefix, 1)
    started: list[subprocess.Popen[bytes]] = []
    try:
        started.append(_start(stack, "memory", log_dir))
        wait_ready(started[-1], stack.ports["memory"][0], 120, "memory")
        engine = _start(stack, "engine", log_dir)
        started.append(engine)
        wait_ready(engine, stack.ports["engine"][0], 120, "engine")
        ready_kib = _status_kib(engine.pid, "VmRSS")
        time.sleep(idle_s)  # a bench: the idle replica's settled footprint, not a test wait
        return {
            "ready_rss_mib": round(ready_kib / 1024, 1),
            "idle_rss_mib": round(_status_kib(engine.pid, "VmRSS") / 1024, 1),
            "peak_rss_mib": round(_status_kib(engine.pid, "VmHWM") / 1024, 1),
            "native_tool_libs": _native(engine.pid),
        }
    finally:
        for process in reversed(started):
            _stop(process)
        delete_topics(stack.prefix)


def measure_import() -> dict[str, Any]:
    """A fresh interpreter that imports the engine's app module and builds the app."""
    done = subprocess.run(
        [sys.executable, "-c", _IMPORT_PROBE], capture_output=True, text=True, check=True,
        timeout=180, env={**os.environ, "WEFT_LOG_FORMAT": "json"},
    )  # fmt: skip
    found: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return {"rss_mib": round(found["rss_kib"] / 1024, 1), "modules": found["modules"],
            "heavy": found["heavy"]}  # fmt: skip


FOOTPRINT_OF = ("weft-engine", "weft-agent-config", "weft-gateway", "weft-sandbox")
"""The services that need the tool catalog but not the implementations."""

HEAVY_DISTRIBUTIONS = (
    "duckdb", "numpy", "pypdf", "openpyxl", "beautifulsoup4", "markdownify", "mcp",
    "snowballstemmer", "weft-tools",
)  # fmt: skip


def _requirement_name(requirement: str) -> str:
    match = re.match(r"[A-Za-z0-9_.\-]+", requirement)
    return (match.group(0) if match else requirement).lower().replace("_", "-")


def measure_footprint(root: str = "weft-engine") -> dict[str, Any]:
    """The distributions ``root`` needs (extras not taken) and their installed size."""
    seen: dict[str, int] = {}
    pending = [root]
    while pending:
        name = pending.pop()
        if name in seen:
            continue
        try:
            found = distribution(name)
        except PackageNotFoundError:  # a marker-excluded dependency
            continue
        seen[name] = sum(f.size or 0 for f in found.files or [])
        pending += [_requirement_name(r) for r in found.requires or [] if "extra ==" not in r]
    return {
        "distributions": len(seen),
        "installed_mib": round(sum(seen.values()) / 2**20, 1),
        "heavy": sorted(set(seen) & set(HEAVY_DISTRIBUTIONS)),
    }


def _median(runs: list[dict[str, Any]], key: str) -> float:
    return round(statistics.median(r[key] for r in runs), 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--idle", type=float, default=5.0, help="seconds idle before reading")
    parser.add_argument("--label", default="", help="e.g. before / after (names the JSON)")
    parser.add_argument("--skip-process", action="store_true", help="the import measure only")
    args = parser.parse_args()
    imports = [measure_import() for _ in range(args.runs)]
    processes = [] if args.skip_process else [measure_process(args.idle) for _ in range(args.runs)]
    result: dict[str, Any] = {
        "machine": machine(),
        "label": args.label,
        "import": {"rss_mib_median": _median(imports, "rss_mib"), "runs": imports},
        "footprint": {root: measure_footprint(root) for root in FOOTPRINT_OF},
    }
    if processes:
        result["process"] = {
            "idle_rss_mib_median": _median(processes, "idle_rss_mib"),
            "ready_rss_mib_median": _median(processes, "ready_rss_mib"),
            "runs": processes,
        }
    save("engine_rss" + (f"_{args.label}" if args.label else ""), result)


if __name__ == "__main__":
    main()
