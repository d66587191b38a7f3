"""Run every benchmark under bench/ (``make bench``); each prints numbers and writes JSON."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCHES = [
    "turn_latency.py",
    "engine_bench.py",
    "stack_cpu.py",
    "sse_fanout.py",
    "history_reload.py",
    "token_estimator.py",
    "agent_resolve.py",
    "vision_overhead.py",
    "tool_spans.py",
    "batch_idle_latency.py",
    "service_tokens.py",
]


def main() -> int:
    here = Path(__file__).parent
    failed = 0
    for name in BENCHES:
        print(f"== {name}", flush=True)
        failed += subprocess.run([sys.executable, str(here / name)], check=False).returncode != 0
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
