"""Tenant C's tool-call latency, alone and while tenant B floods tool-exec with slow calls.

Starts two ``python -m weft_tool_exec`` workers on fresh topics (real Kafka, Redis,
PostgreSQL) and measures C's ``thinking`` calls one after another (send, wait for the
result: the round trip through Kafka and a worker):

1. ``alone``: C only;
2. ``flood``: while B keeps FLOOD ``web_fetch`` calls of a page that answers after
   ``--slow-s`` seconds outstanding (topped up as they finish), with the shipped defaults
   (4 runners per worker, B capped at 3 calls across workers);
3. ``flood_uncapped``: the same flood with the per-tenant cap across workers lifted
   (``WEFT_TOOL_TENANT_MAX_INFLIGHT=1000``; round-robin and the per-worker share on);
4. ``flood_no_caps``: the cap and the per-worker share both off
   (``WEFT_TOOL_TENANT_MAX_LOCAL=0`` too; round-robin alone): what the two bounds buy.

No model is involved, so no LLM pacing is measured. This is C's *tool-call* latency.
Prints p50/p99 per phase, the ratio against ``alone`` and the load average; writes
``bench/results/fairness.json``.

With ``--turns``: C's *whole-turn* latency instead (POST /agent-chat to ``complete``,
through the gateway, two engines and the scripted LLM), on a stack whose engines have
``--step-slots`` step slots each, so that B's slow turns can fill them:

1. ``turns_alone``: C's turns one after another (a fresh session each, answered at once);
2. ``turns_flood``: while B keeps ``--flood-turns`` turns outstanding, each streaming its
   answer for about ``--slow-turn-s`` seconds, B capped at ``--turn-cap`` turns;
3. ``turns_uploads`` (capped stack, ``--uploads`` > 0): while B keeps ``--uploads``
   document uploads of ``--upload-kib`` KiB in flight, so its ingestion never idles,
   through ``--upload-route`` (``documents``: texts as JSON, the default; ``files``);
4. ``turns_flood_share_only``: the turn flood on a stack with the turn cap off
   (``WEFT_TURN_TENANT_MAX_INFLIGHT=0``): each engine's share per tenant (all but one
   step slot) is the one bound left;
5. ``turns_flood_no_bounds``: the same with that share lifted too
   (``WEFT_TURN_TENANT_MAX_LOCAL=0``): what the two bounds buy.

Writes ``bench/results/fairness_turns.json``.

With ``--sandbox``: C's ``shell_exec echo`` latency (publish on ``sandbox.calls`` to the
result, in one warm session of C) on one ``python -m weft_sandbox`` replica with the
shipped fair-share defaults (4 runners, a tenant capped at 3 calls and 3 runners):

1. ``sandbox_alone``: C's calls one after another;
2. ``sandbox_flood``: while B keeps ``--sandbox-flood`` ``sleep --sandbox-sleep-s``
   commands outstanding, each in its own session (topped up as they end).

Writes ``bench/results/fairness_sandbox.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import statistics
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine
from weft_gateway.auth import ApiKeyAuth
from weft_testkit import LocalStack, StackConfig, infra_env, read_turn
from weft_testkit.stack import create_topics
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
    return _summary(name, latencies, flood_sent, load_before, "calls")


# -- whole turns ------------------------------------------------------------------------

SLOW_CHUNK_MS = 150


async def _new_session(api: httpx.AsyncClient) -> str:
    body = {"name": "fair", "kb_selection_mode": "none", "allowed_tools": []}
    agent = (await api.post("/api/v1/agents", json=body)).raise_for_status().json()
    made = await api.post("/api/v1/sessions", json={"agent_id": agent["id"]})
    return str(made.raise_for_status().json()["id"])


async def _turn(api: httpx.AsyncClient, key: str, query: str) -> float:
    """One turn in a fresh session: ms from the POST to ``complete``."""
    session = await _new_session(api)
    started = time.perf_counter()
    events = await read_turn(
        api, f"/api/v1/agent-chat/{session}", api_key=key, json_body={"query": query},
        timeout_s=600,
    )  # fmt: skip
    if events[-1].data["data"]["status"] != "completed":
        raise RuntimeError(f"turn did not complete: {events[-1].data}")
    return (time.perf_counter() - started) * 1000


async def _flood_turns(
    api: httpx.AsyncClient, key: str, outstanding: int, stop: asyncio.Event
) -> int:
    """Keep ``outstanding`` slow turns of B open until ``stop``; turns sent."""
    running: set[asyncio.Task[float]] = set()
    sent = 0
    while not stop.is_set():
        while len(running) < outstanding:
            task = asyncio.create_task(_turn(api, key, f"FLOODB {sent}"))
            running.add(task)
            task.add_done_callback(running.discard)
            sent += 1
        await asyncio.sleep(0.05)
    for task in list(running):
        task.cancel()
    await asyncio.gather(*running, return_exceptions=True)
    return sent


async def _flood_uploads(
    api: httpx.AsyncClient, outstanding: int, doc_kib: int, stop: asyncio.Event, route: str
) -> int:
    """Keep ``outstanding`` uploads of B (``doc_kib`` KiB of text each, into one knowledge
    base, through ``route``: ``files`` or the JSON ``documents``) in flight until ``stop``,
    so its ingestion queue never empties; documents sent."""
    made = await api.post("/api/v1/knowledge-bases", json={"name": "flood"})
    kb = made.raise_for_status().json()["id"]
    paragraph = "Tenant B uploads this paragraph again and again to keep ingestion busy. "
    body = (paragraph * (doc_kib * 1024 // len(paragraph) + 1))[: doc_kib * 1024]
    sent = 0

    async def one(n: int) -> None:
        # Both routes queue the document for tool-exec, under the per-tenant ingestion cap;
        # the JSON one also waits (up to the gateway's document_wait_s) for it.
        if route == "files":
            files = {"file": (f"flood-{n}.md", body.encode(), "text/markdown")}
            answer = await api.post(f"/api/v1/knowledge-bases/{kb}/files", files=files)
        else:
            doc = {"title": f"flood {n}", "content": body}
            answer = await api.post(f"/api/v1/knowledge-bases/{kb}/documents", json=doc)
        answer.raise_for_status()

    running: set[asyncio.Task[None]] = set()
    while not stop.is_set():
        while len(running) < outstanding:
            task = asyncio.create_task(one(sent))
            running.add(task)
            task.add_done_callback(running.discard)
            sent += 1
        await asyncio.sleep(0.05)
    await asyncio.gather(*running, return_exceptions=True)
    return sent


def _summary(
    name: str, latencies: list[float], flood_sent: int, load: float, unit: str = "turns"
) -> dict[str, Any]:
    """One phase's latencies of ``unit`` (turns or calls) and the flood sent meanwhile."""
    result = {
        "phase": name,
        unit: len(latencies),
        "p50_ms": round(statistics.median(latencies), 1),
        "p99_ms": round(_percentile(latencies, 0.99), 1),
        "max_ms": round(max(latencies), 1),
        f"flood_{unit}_sent": flood_sent,
        "load_avg_1m": [round(load, 2), round(os.getloadavg()[0], 2)],
    }
    print(json.dumps(result))
    return result


async def turn_phases(
    args: argparse.Namespace, cap: int, *, share: bool = True
) -> list[dict[str, Any]]:
    """On one stack with turn cap ``cap`` (and each engine's share per tenant unless
    ``share`` is False): C alone (capped stack only), then C while B floods."""
    config = StackConfig(
        log_dir=REPO / ".weft/logs/bench-fair-turns", replicas={"engine": 2},
        extra_env={
            "WEFT_MAX_INFLIGHT_TURNS": str(args.step_slots),
            "WEFT_TURN_TENANT_MAX_INFLIGHT": str(cap),
            **({} if share else {"WEFT_TURN_TENANT_MAX_LOCAL": "0"}),
        },
    )  # fmt: skip
    pieces = max(1, int(args.slow_turn_s * 1000 / SLOW_CHUNK_MS))
    slow = {"match": "FLOODB", "content": ["w "] * pieces, "chunk_delay_ms": SLOW_CHUNK_MS}
    results: list[dict[str, Any]] = []
    engine = create_async_engine(infra_env()["WEFT_DATABASE_URL"])
    with LocalStack(config) as stack:
        b_key = f"key-{os.urandom(16).hex()}"
        await ApiKeyAuth(async_sessionmaker(engine)).register(
            f"flood-{stack.tenant}", "dev", b_key, "bench", None
        )
        await engine.dispose()
        b_headers = {"Authorization": f"Bearer {b_key}"}
        async with (
            stack.api_client(timeout=600) as c_api,
            httpx.AsyncClient(base_url=stack.gateway_url, headers=b_headers, timeout=600) as b_api,
            httpx.AsyncClient(base_url=stack.llm_url, timeout=30) as llm,
        ):
            steps = [slow] * 2000  # C's turns fall back to the demo's echo, at once
            (
                await llm.post("/_script", json={"steps": steps, "fallback": "demo"})
            ).raise_for_status()

            async def quiet(count: int) -> list[float]:
                return [await _turn(c_api, stack.api_key, "hello there") for _ in range(count)]

            await quiet(3)  # warm-up
            if cap:
                load = os.getloadavg()[0]
                results.append(_summary("turns_alone", await quiet(args.turn_count), 0, load))
            stop = asyncio.Event()
            flooding = asyncio.create_task(_flood_turns(b_api, b_key, args.flood_turns, stop))
            await asyncio.sleep(args.slow_turn_s)  # B's turns fill the slots first
            load = os.getloadavg()[0]
            latencies = await quiet(args.turn_count)
            stop.set()
            name = (
                "turns_flood"
                if cap
                else "turns_flood_share_only"
                if share
                else "turns_flood_no_bounds"
            )
            results.append(_summary(name, latencies, await flooding, load))
            if cap and args.uploads:
                stop = asyncio.Event()
                uploading = asyncio.create_task(
                    _flood_uploads(b_api, args.uploads, args.upload_kib, stop, args.upload_route)
                )
                await asyncio.sleep(args.slow_turn_s)  # B's documents queue up first
                load = os.getloadavg()[0]
                latencies = await quiet(args.turn_count)
                stop.set()
                results.append(_summary("turns_uploads", latencies, await uploading, load))
    return results


async def turns_main(args: argparse.Namespace) -> None:
    capped = await turn_phases(args, args.turn_cap)
    share_only = await turn_phases(args, 0)
    unbounded = await turn_phases(args, 0, share=False)
    alone, flood = capped[:2]
    summary = {
        "phases": [*capped, *share_only, *unbounded],
        "p99_ratio_flood_over_alone": round(flood["p99_ms"] / alone["p99_ms"], 2),
        **(
            {"p99_ratio_uploads_over_alone": round(capped[2]["p99_ms"] / alone["p99_ms"], 2)}
            if len(capped) > 2
            else {}
        ),
        "p99_ratio_share_only_over_alone": round(share_only[0]["p99_ms"] / alone["p99_ms"], 2),
        "p99_ratio_no_bounds_over_alone": round(unbounded[0]["p99_ms"] / alone["p99_ms"], 2),
        "target": "p99 with flood <= 2x alone",
        "engines": 2,
        "step_slots_per_engine": args.step_slots,
        "turn_cap": args.turn_cap,
        "flood_turns": args.flood_turns,
        "slow_turn_s": args.slow_turn_s,
        "cpus": os.cpu_count(),
    }
    print(json.dumps(summary, indent=2))
    out = REPO / "bench/results/fairness_turns.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(summary, indent=2) + "\n")


# -- the sandbox -------------------------------------------------------------------------


async def _sandbox_calls(client: ToolCallClient, session: str, count: int) -> list[float]:
    """C's ``shell_exec echo`` calls in ``session``, one after another: latencies in ms."""
    latencies: list[float] = []
    for _ in range(count):
        started = time.perf_counter()
        call_id = await client.send(
            "shell_exec", {"command": "echo hi"}, tenant="tenant-c", session=session,
            deadline_s=300,
        )  # fmt: skip
        await client.wait_for([call_id], timeout_s=600)
        [data] = client.results[call_id]
        if not data["success"]:
            raise RuntimeError(f"C's call failed: {data.get('error')}")
        latencies.append((client.arrived[call_id] - started) * 1000)
    return latencies


async def _sandbox_flood(
    client: ToolCallClient, outstanding: int, sleep_s: float, stop: asyncio.Event
) -> list[str]:
    """Keep ``outstanding`` long commands of B in flight (one session each) until
    ``stop``; the ids of the calls sent."""
    sent: list[str] = []
    command = {"command": f"sleep {sleep_s:g}", "timeout_sec": int(sleep_s) + 30}
    while not stop.is_set():
        open_calls = sum(1 for c in sent if c not in client.results)
        if open_calls < outstanding:
            batch: list[tuple[str, dict[str, Any], str | None]] = [
                ("shell_exec", command, f"b-{secrets.token_hex(4)}")
                for _ in range(outstanding - open_calls)
            ]
            sent += await client.send_many(batch, tenant="tenant-b", deadline_s=600)
        await asyncio.sleep(0.1)
    return sent


async def sandbox_main(args: argparse.Namespace) -> None:
    sys.path.insert(0, str(REPO))  # run as a script: bench/ is on the path, not the repo
    from bench.sandbox import _start_replica, _stop_replica

    log_dir = REPO / ".weft/logs/bench-fair-sandbox"
    log_dir.mkdir(parents=True, exist_ok=True)
    prefix = f"fs{secrets.token_hex(4)}."
    create_topics(prefix, 6)
    _, process = _start_replica(prefix, 4, log_dir)
    phases: list[dict[str, Any]] = []
    try:
        async with ToolCallClient(prefix, sandbox=True) as client:
            session = f"c-{secrets.token_hex(4)}"
            await _sandbox_calls(client, session, 3)  # group joined, C's workspace made
            load = os.getloadavg()[0]
            alone = await _sandbox_calls(client, session, args.calls)
            phases.append(_summary("sandbox_alone", alone, 0, load, "calls"))
            stop = asyncio.Event()
            flooding = asyncio.create_task(
                _sandbox_flood(client, args.sandbox_flood, args.sandbox_sleep_s, stop)
            )
            await asyncio.sleep(3)  # B's commands hold their runners before C measures
            load = os.getloadavg()[0]
            flood = await _sandbox_calls(client, session, args.calls)
            stop.set()
            b_sent = await flooding
            phases.append(_summary("sandbox_flood", flood, len(b_sent), load, "calls"))
            b_done = sum(1 for c in b_sent if c in client.results)
            phases[-1]["flood_calls_done_while_c_measured"] = b_done
    finally:
        _stop_replica(process, prefix)
    uptime = await asyncio.to_thread(subprocess.run, ["uptime"], capture_output=True, text=True)
    summary = {
        "phases": phases,
        "p99_ratio_flood_over_alone": round(phases[1]["p99_ms"] / phases[0]["p99_ms"], 2),
        "target": "p99 with flood <= 2x alone",
        "flood": args.sandbox_flood,
        "sleep_s": args.sandbox_sleep_s,
        "cpus": os.cpu_count(),
        "uptime": uptime.stdout.strip(),
    }
    print(json.dumps(summary, indent=2))
    out = REPO / "bench/results/fairness_sandbox.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(summary, indent=2) + "\n")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=60, help="C's calls per phase")
    parser.add_argument("--flood", type=int, default=24, help="B's calls kept outstanding")
    parser.add_argument("--slow-s", type=float, default=2.0, help="B's page answer time")
    parser.add_argument("--turns", action="store_true", help="whole turns instead of calls")
    parser.add_argument("--turn-count", type=int, default=20, help="C's turns per phase")
    parser.add_argument("--flood-turns", type=int, default=12, help="B's open turns")
    parser.add_argument("--slow-turn-s", type=float, default=3.0, help="B's answer time")
    parser.add_argument("--step-slots", type=int, default=4, help="per engine")
    parser.add_argument("--turn-cap", type=int, default=3, help="B's turn cap")
    parser.add_argument(
        "--uploads", type=int, default=4,
        help="with --turns: B's uploads kept in flight in a last phase (0: no such phase)",
    )  # fmt: skip
    parser.add_argument("--upload-kib", type=int, default=256, help="size of B's documents")
    parser.add_argument(
        "--upload-route", choices=("documents", "files"), default="documents",
        help="B's uploads as JSON texts (POST .../documents) or files (POST .../files)",
    )  # fmt: skip
    parser.add_argument("--sandbox", action="store_true", help="C's shell_exec instead")
    parser.add_argument("--sandbox-flood", type=int, default=8, help="B's long commands")
    parser.add_argument("--sandbox-sleep-s", type=float, default=60.0, help="B's command time")
    args = parser.parse_args()
    if args.sandbox:
        await sandbox_main(args)
        return
    if args.turns:
        await turns_main(args)
        return
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
        no_caps = await phase(
            "flood_no_caps", args.calls, url, flood=args.flood,
            env={"WEFT_TOOL_TENANT_MAX_INFLIGHT": "1000", "WEFT_TOOL_TENANT_MAX_LOCAL": "0"},
        )  # fmt: skip
    finally:
        httpd.shutdown()
    summary = {
        "phases": [alone, flood, uncapped, no_caps],
        "p99_ratio_flood_over_alone": round(flood["p99_ms"] / alone["p99_ms"], 2),
        "p99_ratio_uncapped_over_alone": round(uncapped["p99_ms"] / alone["p99_ms"], 2),
        "p99_ratio_no_caps_over_alone": round(no_caps["p99_ms"] / alone["p99_ms"], 2),
        "target": "p99 with flood <= 2x alone",
        "cpus": os.cpu_count(),
    }
    print(json.dumps(summary, indent=2))
    out = REPO / "bench/results/fairness.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(summary, indent=2) + "\n")


if __name__ == "__main__":
    asyncio.run(main())
