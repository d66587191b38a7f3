"""Tool throughput with 1, 2 and 4 tool-exec workers on a mixed read-only workload.

Each configuration starts N ``python -m weft_tool_exec`` processes (one Kafka consumer
each, ``WEFT_TOOL_CONCURRENCY=1``) on fresh topics, sends a warm-up, then CALLS calls
(ten per session, as a turn's rounds would) as fast as Kafka takes them: a fixed mix of
thinking, todo_write, search_knowledge (keyword, PostgreSQL), data_analysis (DuckDB over
an uploaded CSV) and web_fetch (a local page answering after 20 ms). Measures calls/s
until the last result arrives; prints the numbers, the scaling ratio against one worker
and the median tool time per tool; writes ``bench/results/tool_throughput.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine
from weft_storage.knowledge.ingest import IngestionQueue
from weft_storage.knowledge.store import KnowledgeStore
from weft_testkit import infra_env
from weft_testkit.tool_workers import ToolCallClient, ToolWorkerPool

REPO = Path(__file__).resolve().parents[1]
CSV = "region,revenue\n" + "".join(f"r{i % 7},{i}\n" for i in range(2000))


class _Page(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        time.sleep(0.02)
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.end_headers()
        self.wfile.write(b"<html><body><h1>Bench</h1><p>" + b"text " * 400 + b"</p></body></html>")

    def log_message(self, *args: object) -> None:
        pass


async def prepare(tenant: str) -> str:
    """A KB with text documents and one CSV (ingested by the workers); returns the CSV id."""
    engine = create_async_engine(infra_env()["WEFT_DATABASE_URL"])
    sessions = async_sessionmaker(engine, expire_on_commit=False)
    store = KnowledgeStore(sessions)
    kb = await store.create_knowledge_base(tenant, "bench")
    for i in range(50):
        await store.add_document(
            tenant, kb, f"Doc {i}", f"Refund policy {i}: plans refunded in {i} days. " * 8
        )
    csv_id = await IngestionQueue(sessions).enqueue_file(
        tenant, kb, title="sales.csv", file_name="sales.csv", content=CSV.encode()
    )
    await engine.dispose()
    return csv_id


def workload(csv_id: str, url: str, i: int) -> tuple[str, dict[str, Any]]:
    think = {
        "thought": f"step {i}",
        "next_thought_needed": True,
        "thought_number": 1,
        "total_thoughts": 2,
    }
    mix: list[tuple[str, dict[str, Any]]] = [
        ("thinking", think),
        ("todo_write", {"steps": [{"id": "1", "description": "search", "status": "pending"}]}),
        ("search_knowledge", {"query": f"refund policy {i % 50} days", "mode": "keyword"}),
        (
            "data_analysis",
            {"knowledge_id": csv_id, "sql": "SELECT region, sum(revenue) FROM dataset GROUP BY 1"},
        ),
        ("web_fetch", {"items": [{"url": url}]}),
    ]
    return mix[i % len(mix)]


async def run(workers: int, calls: int, url: str, log_dir: Path) -> dict[str, Any]:
    tenant = f"bench-{secrets.token_hex(4)}"
    csv_id = await prepare(tenant)
    env = {
        "WEFT_TOOL_CONCURRENCY": "1",
        "WEFT_WEB_FETCH_ALLOW_LOOPBACK": "true",
        "WEFT_LOG_LEVEL": "WARNING",
    }
    pool = ToolWorkerPool(log_dir, extra_env=env)
    try:
        for n in range(workers):
            await asyncio.to_thread(pool.start, f"w{n}")
        async with ToolCallClient(pool.prefix) as client:
            warm = [
                await client.send(
                    *workload(csv_id, url, i), tenant=tenant, session=f"w{i // 10}", deadline_s=900
                )
                for i in range(20)
            ]
            await client.wait_for(warm, timeout_s=300)
            batch = [(*workload(csv_id, url, i), f"s{i // 10}") for i in range(calls)]
            started = time.perf_counter()
            # All at once, like many busy turns: a send-and-wait per call would measure
            # this client's round trips to Kafka instead of the workers.
            ids = await client.send_many(batch, tenant=tenant, deadline_s=900)
            await client.wait_for(ids, timeout_s=600)
            elapsed = time.perf_counter() - started
        failed = [c for c in ids if not client.results[c][0]["success"]]
        spread = sorted({client.results[c][0]["worker"] for c in ids})
        per_tool: dict[str, list[int]] = {}
        for c in ids:
            first = client.results[c][0]
            per_tool.setdefault(first["tool_name"], []).append(first["duration_ms"])
        durations = {t: sorted(v)[len(v) // 2] for t, v in per_tool.items()}
    finally:
        await asyncio.to_thread(pool.stop)
    return {
        "workers": workers,
        "calls": calls,
        "seconds": round(elapsed, 2),
        "calls_per_s": round(calls / elapsed, 1),
        "failed": len(failed),
        "workers_used": spread,
        "median_tool_ms": durations,
    }


async def main(calls: int, out: Path) -> None:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Page)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{httpd.server_address[1]}/page"
    rows = []
    print(f"load average at start: {os.getloadavg()}", flush=True)
    for workers in (1, 2, 4):
        row = await run(workers, calls, url, REPO / ".weft" / "logs" / "bench")
        rows.append(row)
        ratio = row["calls_per_s"] / rows[0]["calls_per_s"]
        row["scaling_vs_1"] = round(ratio, 2)
        print(
            f"{workers} worker(s): {row['calls_per_s']:6.1f} calls/s  x{ratio:.2f}  "
            f"failed {row['failed']}  used {row['workers_used']}  tool ms {row['median_tool_ms']}",
            flush=True,
        )
    httpd.shutdown()
    result = {
        "cores": os.cpu_count(),
        "loadavg_at_end": [round(x, 2) for x in os.getloadavg()],
        "mix": "thinking, todo_write, search_knowledge, data_analysis, web_fetch",
        "runs": rows,
    }
    await asyncio.to_thread(_write, out, result)


def _write(out: Path, result: dict[str, Any]) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument(
        "--out", type=Path, default=REPO / "bench" / "results" / "tool_throughput.json"
    )
    args = parser.parse_args()
    asyncio.run(main(args.calls, args.out))
