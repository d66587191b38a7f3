"""History reload of a 5000-message session (SPEC M-08): p50/p90 time of
``GET /internal/sessions/{id}/history`` with a 200k-token budget, and the peak memory of
the memory service process serving it.

Starts ``python -m weft_memory`` alone (own topic prefix) on the real PostgreSQL/Redis/
Kafka, seeds one session of 2500 turns (5000 rows; a third of the turns with a tool round),
then reloads it N times. Writes ``bench/results/history_reload.json``.

    .venv/bin/python bench/history_reload.py --runs 30
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
from benchlib import machine, save
from sqlalchemy import insert
from sqlalchemy.ext.asyncio import create_async_engine
from weft_storage.memory.models import ChatSession, Message
from weft_testkit.credentials import DevCredentials, credentials_dir
from weft_testkit.stack import free_port, infra_env

REPO = Path(__file__).resolve().parents[1]
TURNS = 2500
WORDS = ["refund", "plan", "invoice", "storage", "latency", "region", "contract", "upgrade"]


def _text(i: int, n: int) -> str:
    return " ".join(WORDS[(i + k) % len(WORDS)] for k in range(n))


def _rows(tenant: str, sid: str) -> list[dict[str, Any]]:
    base, rows = datetime(2026, 1, 1, tzinfo=UTC), []
    for i in range(TURNS):
        at = base + timedelta(seconds=i)
        steps = []
        if i % 3 == 0:
            steps = [{"round": 0, "thought": "", "tool_calls": [{
                "call_id": f"c{i}", "tool_name": "database_query", "arguments": {"sql": "select"},
                "success": True, "output": _text(i, 120)}]}]  # fmt: skip
        common = {"tenant_id": tenant, "session_id": sid, "request_id": f"{sid}-r{i}",
                  "is_completed": True, "status": "completed"}  # fmt: skip
        rows.append({**common, "id": f"{sid[-12:]}u{i:05d}", "role": "user",
                     "content": _text(i, 25), "created_at": at, "agent_steps": []})  # fmt: skip
        rows.append({**common, "id": f"{sid[-12:]}a{i:05d}", "role": "assistant",
                     "content": _text(i, 90), "agent_steps": steps,
                     "created_at": at + timedelta(microseconds=1)})  # fmt: skip
    return rows


async def _seed(env: dict[str, str]) -> tuple[str, str]:
    tenant, sid = f"bench-{secrets.token_hex(4)}", f"ses_bench{secrets.token_hex(6)}"
    engine = create_async_engine(env["WEFT_DATABASE_URL"])
    async with engine.begin() as conn:
        await conn.execute(insert(ChatSession).values(id=sid, tenant_id=tenant, user_id="u"))
        rows = _rows(tenant, sid)
        for start in range(0, len(rows), 1000):
            await conn.execute(insert(Message), rows[start : start + 1000])
    await engine.dispose()
    return tenant, sid


def _memory_kb(pid: int) -> dict[str, int]:
    status = Path(f"/proc/{pid}/status").read_text().splitlines()
    fields = {line.split(":")[0]: line.split()[1] for line in status if line.startswith("Vm")}
    return {"rss_kb": int(fields["VmRSS"]), "peak_rss_kb": int(fields["VmHWM"])}


def _start(env: dict[str, str], port: int, log: Path) -> subprocess.Popen[bytes]:
    prefix = f"b{secrets.token_hex(4)}."
    subprocess.run(
        [sys.executable, "-m", "weft_platform.topics", "ensure", "--prefix", prefix,
         "--bootstrap", env["WEFT_KAFKA_BOOTSTRAP"]],
        env={**os.environ, **env}, check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    proc_env = {**os.environ, **env, "WEFT_HTTP_PORT": str(port), "WEFT_METRICS_PORT": "0",
                "WEFT_TOPIC_PREFIX": prefix,
                "WEFT_CREDENTIALS_DIR": str(credentials_dir())}  # fmt: skip
    out = open(log, "ab")  # noqa: SIM115 - handed to the child process
    return subprocess.Popen([sys.executable, "-m", "weft_memory"], env=proc_env, stdout=out,
                            stderr=subprocess.STDOUT)  # fmt: skip


async def _wait_ready(url: str, proc: subprocess.Popen[bytes]) -> None:
    async with httpx.AsyncClient(timeout=3) as http:
        for _ in range(300):
            if proc.poll() is not None:
                raise RuntimeError("memory exited at start")
            try:
                if (await http.get(f"{url}/readyz")).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            await asyncio.sleep(0.3)
    raise RuntimeError("memory not ready")


async def _measure(url: str, tenant: str, sid: str, budget: int, runs: int) -> dict[str, Any]:
    times, body = [], {}
    headers = DevCredentials.load().headers(tenant, session_id=sid)  # as the engine's call
    async with httpx.AsyncClient(base_url=url, timeout=60, headers=headers) as http:
        params = {"tenant_id": tenant, "token_budget": budget}
        for i in range(runs + 1):
            started = time.perf_counter()
            resp = await http.get(f"/internal/sessions/{sid}/history", params=params)
            resp.raise_for_status()
            if i:  # the first call warms the connection pool and the encoder
                times.append((time.perf_counter() - started) * 1000)
            body = resp.json()
    times.sort()
    return {
        "token_budget": budget, "runs": runs, "turns": len(body["turns"]),
        "messages": len(body["messages"]), "tokens": body["tokens"],
        "p50_ms": round(statistics.median(times), 1),
        "p90_ms": round(times[int(0.9 * (len(times) - 1))], 1),
    }  # fmt: skip


async def run(runs: int) -> dict[str, Any]:
    env = infra_env()
    migrate = [sys.executable, "-m", "weft_storage.migrate", "upgrade"]
    await asyncio.to_thread(
        subprocess.run, migrate, env={**os.environ, **env}, check=True, capture_output=True
    )
    tenant, sid = await _seed(env)
    port, log = free_port(), REPO / ".weft" / "logs" / "history_reload-memory.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    proc = _start(env, port, log)
    url = f"http://127.0.0.1:{port}"
    try:
        await _wait_ready(url, proc)
        idle = _memory_kb(proc.pid)
        full = await _measure(url, tenant, sid, 200_000, runs)
        small = await _measure(url, tenant, sid, 8_000, runs)
        after = _memory_kb(proc.pid)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    return {
        "bench": "history_reload", "rows": 2 * TURNS, "full_window": full, "small_budget": small,
        "memory_service_rss_idle_kb": idle["rss_kb"], "memory_service_peak_rss_kb":
        after["peak_rss_kb"], "memory_service_rss_after_kb": after["rss_kb"],
        **machine(),
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()
    result = asyncio.run(run(args.runs))
    save("history_reload", result)


if __name__ == "__main__":
    main()
