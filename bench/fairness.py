"""Tenant C's tool-call latency, alone and while tenant B floods tool-exec with slow calls.

Starts two ``python -m weft_tool_exec`` workers on fresh topics (real Kafka, Redis,
PostgreSQL) and measures C's ``thinking`` calls one after another (send, wait for the
result: the round trip through Kafka and a worker):

1. ``alone``: C only;
2. ``flood``: while B keeps FLOOD ``web_fetch`` calls of a page that answers after
   ``--slow-s`` seconds outstanding (topped up as they finish), with the shipped defaults
   (4 runners per worker, B capped at 3 calls across workers);
3. ``flood_uncapped``: the same flood with the per-tenant cap lifted
   (``WEFT_TOOL_TENANT_MAX_INFLIGHT=1000``, round-robin still on): what the cap buys.

No model is involved, so no LLM pacing is measured. This is C's *tool-call* latency, the
part of a turn that tenant B could starve; a whole-turn bench (engine, gateway) is not
written yet. Prints p50/p99 per phase, the ratio against ``alone`` and the load average;
writes ``bench/results/fairness.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from weft_testkit.tool_workers import ToolCallClient, ToolWorkerPool

REPO = Path(__file__).resolve().parents[1]
THINK = {"thought": "t", "next_thought_needed": False, "thought_number": 1, "total_thoughts": 1}


class _SlowPage(BaseHTTPRequestHandler):
    delay_s = 2.0

    def do_GET(self) -> None:
        time.sleep(_SlowPage.delay_s)
        try:
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.end_headers()
            self.wfile.write(b"slow page body")
        except (BrokenPipeError, ConnectionResetError):
            pass  # the phase ended and its workers were stopped mid-fetch

    def log_message(self, *args: object) -> None:
        pass


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _quiet_calls(client: ToolCallClient, count: int) -> list[float]:
    latencies: list[float] = []
    for _ in range(count):
        started = time.perf_counter()
        call_id = await client.send("thinking", THINK, tenant="tenant-c", deadline_s=60)
        await client.wait_for([call_id], timeout_s=120)
        latencies.append((time.perf_counter() - started) * 1000)
    return latencies


async def _flood(client: ToolCallClient, url: str, outstanding: int, stop: asyncio.Event) -> int:
    """Keep ``outstanding`` slow calls of B in flight until ``stop``; calls sent."""
    sent: list[str] = []
    fetch: dict[str, Any] = {"items": [{"url": url}]}
    while not stop.is_set():
        open_calls = sum(1 for c in sent if c not in client.results)
        if open_calls < outstanding:
            batch: list[tuple[str, dict[str, Any], str | None]] = [("web_fetch", fetch, None)] * (
                outstanding - open_calls
            )
            sent += await client.send_many(batch, tenant="tenant-b", deadline_s=120)
        await asyncio.sleep(0.05)
    return len(sent)


async def phase(
    name: str, calls: int, url: str, *, flood: int, env: dict[str, str]
) -> dict[str, Any]:
    pool = ToolWorkerPool(
        REPO / ".weft/logs/bench", partitions=6,
        extra_env={"WEFT_WEB_FETCH_ALLOW_LOOPBACK": "true", **env},
    )  # fmt: skip
    try:
        await asyncio.to_thread(pool.start, "fair-a")
        await asyncio.to_thread(pool.start, "fair-b")
        async with ToolCallClient(pool.prefix) as client:
            await _quiet_calls(client, 3)  # warm-up: consumer groups joined, caches filled
            stop = asyncio.Event()
            flooding = asyncio.create_task(_flood(client, url, flood, stop)) if flood else None
            if flooding:
                await asyncio.sleep(3)  # the flood is running before C measures
            load_before = os.getloadavg()[0]
            latencies = await _quiet_calls(client, calls)
            stop.set()
            flood_sent = await flooding if flooding else 0
    finally:
        await asyncio.to_thread(pool.stop)
    result = {
        "phase": name,
        "calls": calls,
        "p50_ms": round(statistics.median(latencies), 1),
        "p99_ms": round(_percentile(latencies, 0.99), 1),
        "max_ms": round(max(latencies), 1),
        "flood_calls_sent": flood_sent,
        "load_avg_1m": [round(load_before, 2), round(os.getloadavg()[0], 2)],
    }
    print(json.dumps(result))
    return result


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=60, help="C's calls per phase")
    parser.add_argument("--flood", type=int, default=24, help="B's calls kept outstanding")
    parser.add_argument("--slow-s", type=float, default=2.0, help="B's page answer time")
    args = parser.parse_args()
    _SlowPage.delay_s = args.slow_s
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _SlowPage)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{httpd.server_address[1]}/slow"
    try:
        alone = await phase("alone", args.calls, url, flood=0, env={})
        flood = await phase("flood", args.calls, url, flood=args.flood, env={})
        uncapped = await phase(
            "flood_uncapped", args.calls, url, flood=args.flood,
            env={"WEFT_TOOL_TENANT_MAX_INFLIGHT": "1000"},
        )  # fmt: skip
    finally:
        httpd.shutdown()
    summary = {
        "phases": [alone, flood, uncapped],
        "p99_ratio_flood_over_alone": round(flood["p99_ms"] / alone["p99_ms"], 2),
        "p99_ratio_uncapped_over_alone": round(uncapped["p99_ms"] / alone["p99_ms"], 2),
        "target": "p99 with flood <= 2x alone",
        "cpus": os.cpu_count(),
    }
    print(json.dumps(summary, indent=2))
    out = REPO / "bench/results/fairness.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(summary, indent=2) + "\n")


if __name__ == "__main__":
    asyncio.run(main())
