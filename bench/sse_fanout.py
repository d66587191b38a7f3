"""SSE fan-out: N concurrent clients on ONE gateway process watching live turns.

Starts its own stack (real Kafka/PostgreSQL/Redis, one gateway), creates S sessions and
opens N SSE streams spread over them (``GET /sessions/{id}/stream``, from several client
processes so the client side is not the bottleneck). Then it publishes agent events on
``weft.agent.events.v1`` the way the engine does (Kafka -> gateway projector -> Redis
Stream -> fan-out -> SSE) and measures, per received event, the delivery latency from
the event's ``time`` (set when produced) to the client's receipt. Prints p50/p99 and the
gateway's resident memory (current and peak) per client count; writes
``bench/results/sse_fanout.json``.

    .venv/bin/python bench/sse_fanout.py --clients 100 1000 2000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import platform
import statistics
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
from aiokafka import AIOKafkaProducer
from httpx_sse import aconnect_sse
from weft_contracts import (
    CompleteData,
    CompleteEvent,
    ThoughtData,
    ThoughtEvent,
    TurnStartedData,
    TurnStartedEvent,
    TurnStatus,
)
from weft_contracts.envelope import Envelope
from weft_testkit import LocalStack, StackConfig

REPO = Path(__file__).resolve().parents[1]
CLIENT_PROCS = 4


def _client_proc(
    base_url: str, key: str, sessions: list[str], count: int, ready: Any, out: Any
) -> None:
    """One client process: ``count`` SSE streams, returns its latencies (ms)."""
    out.put(asyncio.run(_clients(base_url, key, sessions, count, ready)))


async def _clients(
    base_url: str, key: str, sessions: list[str], count: int, ready: Any
) -> dict[str, Any]:
    limits = httpx.Limits(max_connections=count + 10, max_keepalive_connections=0)
    headers = {"Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(
        base_url=base_url, headers=headers, limits=limits, timeout=httpx.Timeout(300, connect=120)
    ) as client:
        results = await asyncio.gather(
            *(_watch(client, sessions[i % len(sessions)], ready) for i in range(count)),
            return_exceptions=True,
        )
    latencies = [ms for r in results if isinstance(r, list) for ms in r]
    errors = [repr(r)[:200] for r in results if isinstance(r, BaseException)]
    return {"latencies": latencies, "errors": errors}


async def _watch(
    client: httpx.AsyncClient, session_id: str, ready: Any
) -> list[tuple[float, float]]:
    latencies: list[tuple[float, float]] = []
    released = False
    try:
        async with aconnect_sse(client, "GET", f"/api/v1/sessions/{session_id}/stream") as src:
            src.response.raise_for_status()
            async for sse in src.aiter_sse():
                if not sse.data:
                    continue
                now = time.time()
                if sse.event == "turn_started":
                    ready.release()
                    released = True
                    continue
                produced = datetime.fromisoformat(json.loads(sse.data)["time"]).timestamp()
                if sse.event == "thought":
                    # the SSE id is the Redis entry id: its ms part is when it was written
                    stored = int(sse.id.split("-")[0]) / 1000
                    latencies.append(((now - produced) * 1000, (now - stored) * 1000))
                if sse.event == "complete":
                    break
    finally:
        if not released:
            ready.release()  # a failed client must not hold the round up
    return latencies


def _rss_kb(pid: int) -> dict[str, int]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            fields[name] = int(value.split()[0])
    return fields


def _gateway_pid(stack: LocalStack) -> int:
    procs = [p for p in stack._procs if p.name == "gateway"]
    return procs[0].process.pid


class _Publisher:
    """Publishes envelopes as the engine would (JSON, keyed by session)."""

    def __init__(self, stack: LocalStack):
        self.topic = f"{stack.prefix}weft.agent.events.v1"
        self.producer = AIOKafkaProducer(
            bootstrap_servers=os.environ.get("WEFT_KAFKA_BOOTSTRAP", "127.0.0.1:19092"),
            linger_ms=0,
        )

    async def send(self, event: Envelope) -> None:
        await self.producer.send(self.topic, event.model_dump_json().encode(), key=event.key())


async def _round(
    stack: LocalStack, api: httpx.AsyncClient, pub: _Publisher, clients: int, args: Any
) -> dict[str, Any]:
    sessions = [
        (await api.post("/api/v1/sessions", json={"agent_id": "builtin-smart-reasoning"})).json()[
            "id"
        ]
        for _ in range(args.sessions)
    ]
    request_ids = {s: f"req_bench_{clients}_{i}" for i, s in enumerate(sessions)}
    ids = {s: {"tenant_id": stack.tenant, "session_id": s, "request_id": r}
           for s, r in request_ids.items()}  # fmt: skip
    for s in sessions:
        data = TurnStartedData(query="bench", user_id="bench", agent_id="bench")
        await pub.send(TurnStartedEvent(**ids[s], seq=1, data=data))
    await pub.producer.flush()
    await _wait_streams(api, sessions)

    ctx = mp.get_context("spawn")
    ready, out = ctx.Semaphore(0), ctx.Queue()
    per_proc = [clients // CLIENT_PROCS + (i < clients % CLIENT_PROCS) for i in range(CLIENT_PROCS)]
    procs = [
        ctx.Process(
            target=_client_proc,
            args=(stack.gateway_url, stack.api_key, sessions, n, ready, out),
        )
        for n in per_proc
        if n
    ]
    for p in procs:
        p.start()
    connect_started = time.monotonic()
    for _ in range(clients):
        await asyncio.to_thread(ready.acquire, True, 300)
    connect_s = time.monotonic() - connect_started

    pid = _gateway_pid(stack)
    rss_idle = _rss_kb(pid)["VmRSS"]
    interval = 1.0 / args.rate
    for seq in range(2, 2 + int(args.seconds * args.rate)):
        tick = time.monotonic()
        for s in sessions:
            data = ThoughtData(round=0, delta=f"token {seq} " * 4)
            await pub.send(ThoughtEvent(**ids[s], seq=seq, data=data))
        await pub.producer.flush()
        await asyncio.sleep(max(0.0, interval - (time.monotonic() - tick)))
    rss_live = _rss_kb(pid)
    for s in sessions:
        done = CompleteData(status=TurnStatus.COMPLETED)
        await pub.send(CompleteEvent(**ids[s], seq=10_000, data=done))
    await pub.producer.flush()

    pairs: list[tuple[float, float]] = []
    errors: list[str] = []
    for _ in procs:
        part = await asyncio.to_thread(out.get, True, 600)
        pairs += [tuple(p) for p in part["latencies"]]
        errors += part["errors"]
    for p in procs:
        p.join(30)
    latencies = sorted(total for total, _ in pairs)
    fanout = sorted(from_redis for _, from_redis in pairs)
    return {
        "clients": clients,
        "sessions": args.sessions,
        "events_per_session_per_s": args.rate,
        "deliveries": len(latencies),
        "client_errors": len(errors),
        "first_errors": errors[:3],
        "connect_all_s": round(connect_s, 2),
        "p50_ms": round(statistics.median(latencies), 1) if latencies else None,
        "p99_ms": round(latencies[int(len(latencies) * 0.99) - 1], 1) if latencies else None,
        "max_ms": round(latencies[-1], 1) if latencies else None,
        "redis_to_client_p50_ms": _pct(fanout, 0.5),
        "redis_to_client_p99_ms": _pct(fanout, 0.99),
        "gateway_rss_idle_mb": round(rss_idle / 1024, 1),
        "gateway_rss_live_mb": round(rss_live["VmRSS"] / 1024, 1),
        "gateway_rss_peak_mb": round(rss_live["VmHWM"] / 1024, 1),
    }


def _pct(values: list[float], q: float) -> float | None:
    return round(values[max(0, int(len(values) * q) - 1)], 1) if values else None


async def _wait_streams(api: httpx.AsyncClient, sessions: list[str]) -> None:
    async with asyncio.timeout(60):
        for s in sessions:
            while True:
                async with aconnect_sse(api, "GET", f"/api/v1/sessions/{s}/stream") as src:
                    if src.response.status_code == 200:
                        break
                await asyncio.sleep(0.2)


async def run(args: Any) -> dict[str, Any]:
    home = Path(os.environ.get("WEFT_HOME", REPO / ".weft"))
    config = StackConfig(
        log_dir=home / "logs" / "bench-sse",
        extra_env={"WEFT_RATE_LIMIT_PER_MINUTE": "0", "WEFT_LOG_LEVEL": "WARNING"},
    )
    rounds = []
    with LocalStack(config) as stack:
        headers = {"Authorization": f"Bearer {stack.api_key}"}
        async with httpx.AsyncClient(
            base_url=stack.gateway_url, headers=headers, timeout=60
        ) as api:
            pub = _Publisher(stack)
            await pub.producer.start()
            try:
                for clients in args.clients:
                    result = await _round(stack, api, pub, clients, args)
                    print(json.dumps(result), flush=True)
                    rounds.append(result)
            finally:
                await pub.producer.stop()
    return {
        "bench": "sse_fanout",
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "rounds": rounds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clients", type=int, nargs="+", default=[100, 1000, 2000])
    parser.add_argument("--sessions", type=int, default=10)
    parser.add_argument("--rate", type=float, default=4.0, help="events per session per second")
    parser.add_argument("--seconds", type=float, default=8.0)
    args = parser.parse_args()
    result = asyncio.run(run(args))
    out = REPO / "bench" / "results" / "sse_fanout.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    for r in result["rounds"]:
        print(
            f"{r['clients']:>5} clients: p50 {r['p50_ms']} ms, p99 {r['p99_ms']} ms, "
            f"{r['deliveries']} deliveries, gateway RSS {r['gateway_rss_live_mb']} MB "
            f"(peak {r['gateway_rss_peak_mb']} MB), errors {r['client_errors']}"
        )
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
