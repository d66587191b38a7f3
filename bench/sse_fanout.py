"""SSE fan-out: N concurrent clients on ONE gateway process watching live turns.

Starts its own stack (real Kafka/PostgreSQL/Redis, one gateway), creates S sessions and
opens N SSE streams spread over them (``GET /sessions/{id}/stream``). Then it publishes
agent events on ``weft.agent.events.v1`` the way the engine does (Kafka -> projector ->
Redis Stream -> fan-out -> SSE) and measures, per received event, the delivery latency
from the event's ``time`` (set when produced) to the client's receipt. (The split at
Redis is gone: the streams' entry ids are the events' ``seq``, no longer a time.) The
engine's auditor is told to leave the bench's turns alone (``WEFT_AUDIT_GRACE_S``): no
engine holds their state, and it would end them as ``turn_state_lost``.

How the load is generated: ``--client-procs`` separate processes (4 by default), each
holding N/procs raw-asyncio SSE connections (``bench/sse_clients.py``: a hand-written
HTTP/1.1 GET and a chunked-frame reader on uvloop, no HTTP client library), so the
clients' CPU is small next to the gateway's; each process reports its CPU seconds. All of
it shares the machine with the gateway, Kafka, Redis and whatever else runs: the load
average is recorded before and after every round.

``--projector separate`` runs the projector as its own process (``python -m weft_gateway
projector``) and the gateway with ``WEFT_PROJECTOR=off``, the deployment that keeps
projection off the SSE event loop; ``embedded`` is the default single-process gateway.

Prints p50/p99 and the gateway's resident memory (current and peak) per client count;
writes ``bench/results/sse_fanout.json``.

    .venv/bin/python bench/sse_fanout.py --clients 100 1000 2000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import platform
import secrets
import statistics
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from sse_clients import client_proc
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
from weft_contracts.topics import Topic
from weft_platform.credentials import RECORDS, load_signer
from weft_platform.record_credentials import record_scope
from weft_testkit import LocalStack, StackConfig, infra_env
from weft_testkit.kafka import client_options

REPO = Path(__file__).resolve().parents[1]
CREDENTIAL_REFRESH_S = 30.0
"""How long the publisher reuses one signed engine credential (they live minutes)."""


def _rss_kb(pid: int) -> dict[str, int]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            fields[name] = int(value.split()[0])
    return fields


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far."""
    user, system = _cpu_split(pid)
    return user + system


def _cpu_split(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of a process so far."""
    stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(stat[11]) / tick, int(stat[12]) / tick


def _gateway_pid(stack: LocalStack) -> int:
    return stack.pids("gateway")[0]


class _Publisher:
    """Publishes envelopes as the engine would (JSON, keyed by session, each carrying the
    engine's record credential: the projector dead-letters a record without one)."""

    def __init__(self, stack: LocalStack):
        self.topic = f"{stack.prefix}weft.agent.events.v1"
        self.producer = AIOKafkaProducer(**client_options(infra_env()), linger_ms=0)
        self._engine = load_signer(stack.credentials_dir, "engine")
        self._credential = ""
        self._signed_at = 0.0

    def _engine_credential(self) -> str:
        now = time.monotonic()
        if now - self._signed_at > CREDENTIAL_REFRESH_S:
            scope = [record_scope(Topic.AGENT_EVENTS)]
            self._credential = self._engine.service(RECORDS, scope)
            self._signed_at = now
        return self._credential

    async def send(self, event: Envelope) -> None:
        signed = event.model_copy(update={"credential": self._engine_credential()})
        await self.producer.send(self.topic, signed.model_dump_json().encode(), key=event.key())


async def _kafka_probe(topic: str, started: asyncio.Event, stop: asyncio.Event) -> list[float]:
    """Produced -> consumed latency (ms) of the thought events by a plain consumer in this
    process: the floor that Kafka and the machine's load put under the projector."""
    consumer = AIOKafkaConsumer(
        topic,
        **client_options(infra_env()),
        group_id=f"bench-probe-{secrets.token_hex(4)}",
        auto_offset_reset="latest",
    )
    await consumer.start()
    latencies: list[float] = []
    try:
        while not consumer.assignment():
            await consumer.getmany(timeout_ms=200)
        await consumer.seek_to_end()
        started.set()
        while not stop.is_set():
            batch = await consumer.getmany(timeout_ms=200)
            now = time.time()
            for records in batch.values():
                for record in records:
                    event = json.loads(record.value)
                    if event["type"] == "thought":
                        produced = datetime.fromisoformat(event["time"]).timestamp()
                        latencies.append((now - produced) * 1000)
    finally:
        await consumer.stop()
    return sorted(latencies)


async def _start_turns(
    stack: LocalStack, api: httpx.AsyncClient, pub: _Publisher, clients: int, args: Any
) -> dict[str, dict[str, str]]:
    sessions = []
    for _ in range(args.sessions):
        created = await api.post("/api/v1/sessions", json={"agent_id": "builtin-smart-reasoning"})
        sessions.append(created.json()["id"])
    ids = {
        s: {"tenant_id": stack.tenant, "session_id": s, "request_id": f"req_bench_{clients}_{i}"}
        for i, s in enumerate(sessions)
    }
    for s in sessions:
        data = TurnStartedData(query="bench", user_id="bench", agent_id="bench")
        await pub.send(TurnStartedEvent(**ids[s], seq=1, data=data))
    await pub.producer.flush()
    await _wait_streams(api, sessions)
    return ids


async def _round(
    stack: LocalStack, api: httpx.AsyncClient, pub: _Publisher, clients: int, args: Any
) -> dict[str, Any]:
    ids = await _start_turns(stack, api, pub, clients, args)
    sessions = list(ids)
    ctx = mp.get_context("spawn")
    ready, out = ctx.Semaphore(0), ctx.Queue()
    n_procs = args.client_procs
    per_proc = [clients // n_procs + (i < clients % n_procs) for i in range(n_procs)]
    procs = [
        ctx.Process(
            target=client_proc,
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
    print(f"# {clients} clients connected in {connect_s:.1f}s; live phase, gateway pid {pid}",
          file=sys.stderr, flush=True)  # fmt: skip
    rss_idle = _rss_kb(pid)["VmRSS"]
    probe_started, probe_stop = asyncio.Event(), asyncio.Event()
    probe = asyncio.create_task(_kafka_probe(pub.topic, probe_started, probe_stop))
    await asyncio.wait_for(probe_started.wait(), 60)
    load_before = os.getloadavg()
    cpu_before, wall_before = _cpu_s(pid), time.monotonic()
    split_before = _cpu_split(pid)
    projector_pid = stack.pids("gateway")[1] if args.projector == "separate" else None
    projector_cpu_before = _cpu_s(projector_pid) if projector_pid is not None else 0.0
    interval = 1.0 / args.rate
    for seq in range(2, 2 + int(args.seconds * args.rate)):
        tick = time.monotonic()
        for s in sessions:
            data = ThoughtData(round=0, delta=f"token {seq} " * 4)
            await pub.send(ThoughtEvent(**ids[s], seq=seq, data=data))
        await pub.producer.flush()
        await asyncio.sleep(max(0.0, interval - (time.monotonic() - tick)))
    gateway_cpu = (_cpu_s(pid) - cpu_before) / (time.monotonic() - wall_before)
    rss_live = _rss_kb(pid)
    load_after = os.getloadavg()
    for s in sessions:
        done = CompleteData(status=TurnStatus.COMPLETED)
        await pub.send(CompleteEvent(**ids[s], seq=10_000, data=done))
    await pub.producer.flush()
    await asyncio.sleep(1.0)  # the probe reads the last events
    probe_stop.set()
    kafka = await probe

    pairs: list[float] = []
    errors: list[str] = []
    client_cpu = 0.0
    for _ in procs:
        part = await asyncio.to_thread(out.get, True, 600)
        pairs += [float(a) for a in part["latencies"]]
        errors += part["errors"]
        client_cpu += part["cpu_s"]
    for p in procs:
        p.join(30)
    # All of this round's deliveries are done: CPU per delivery does not depend on how
    # much CPU the machine's load left the gateway (the latencies do).
    round_cpu_s = _cpu_s(pid) - cpu_before
    kernel_share = (_cpu_split(pid)[1] - split_before[1]) / round_cpu_s if round_cpu_s else 0.0
    if projector_pid is not None:
        round_cpu_s += _cpu_s(projector_pid) - projector_cpu_before
    total = sorted(pairs)
    return {
        "clients": clients,
        "sessions": args.sessions,
        "projector": args.projector,
        "client_processes": len(procs),
        "events_per_session_per_s": args.rate,
        "expected_deliveries": clients * int(args.seconds * args.rate),
        "deliveries": len(total),
        "client_errors": len(errors),
        "first_errors": errors[:3],
        "connect_all_s": round(connect_s, 2),
        "p50_ms": _pct(total, 0.5),
        "p99_ms": _pct(total, 0.99),
        "max_ms": round(total[-1], 1) if total else None,
        "kafka_probe_p50_ms": _pct(kafka, 0.5),
        "kafka_probe_p99_ms": _pct(kafka, 0.99),
        "gateway_cpu_cores_live": round(gateway_cpu, 2),
        "gateway_cpu_us_per_delivery": round(round_cpu_s * 1e6 / len(total), 1) if total else None,
        "gateway_cpu_kernel_share": round(kernel_share, 2),
        "clients_cpu_s_total": round(client_cpu, 1),
        "load_avg_1m_before_after": [round(load_before[0], 2), round(load_after[0], 2)],
        "gateway_rss_idle_mb": round(rss_idle / 1024, 1),
        "gateway_rss_live_mb": round(rss_live["VmRSS"] / 1024, 1),
        "gateway_rss_peak_mb": round(rss_live["VmHWM"] / 1024, 1),
    }


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    if q == 0.5:
        return round(statistics.median(values), 1)
    return round(values[max(0, int(len(values) * q) - 1)], 1)


async def _wait_streams(api: httpx.AsyncClient, sessions: list[str]) -> None:
    """Until every session's stream exists (the projector has written its first event)."""
    async with asyncio.timeout(60):
        for s in sessions:
            while True:
                async with api.stream("GET", f"/api/v1/sessions/{s}/stream") as response:
                    if response.status_code == 200:
                        break
                await asyncio.sleep(0.2)


async def run(args: Any) -> dict[str, Any]:
    home = Path(os.environ.get("WEFT_HOME", REPO / ".weft"))
    # One tenant holds every stream here: no per-tenant cap (SSE_MAX_PER_TENANT, 200 by
    # default, answers 429 past it).
    env = {"WEFT_RATE_LIMIT_PER_MINUTE": "0", "WEFT_LOG_LEVEL": "WARNING",
           "WEFT_AUDIT_GRACE_S": "86400", "WEFT_SSE_MAX_PER_TENANT": "0"}  # fmt: skip
    if args.projector == "separate":
        env["WEFT_PROJECTOR"] = "off"
    config = StackConfig(log_dir=home / "logs" / "bench-sse", extra_env=env)
    rounds = []
    with LocalStack(config) as stack:
        if args.projector == "separate":
            stack.start_extra("gateway", ["projector"])  # the projector alone
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
        "load_generation": f"{args.client_procs} client processes of raw-asyncio SSE "
        "connections (bench/sse_clients.py) on the same machine as the gateway",
        "rounds": rounds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clients", type=int, nargs="+", default=[100, 1000, 2000])
    parser.add_argument("--sessions", type=int, default=10)
    parser.add_argument("--rate", type=float, default=4.0, help="events per session per second")
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--client-procs", type=int, default=4)
    parser.add_argument("--projector", choices=["embedded", "separate"], default="embedded")
    parser.add_argument("--out", default="sse_fanout.json", help="file name in bench/results")
    args = parser.parse_args()
    result = asyncio.run(run(args))
    out = REPO / "bench" / "results" / args.out
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    for r in result["rounds"]:
        print(
            f"{r['clients']:>5} clients: p50 {r['p50_ms']} ms, p99 {r['p99_ms']} ms "
            f"(Kafka alone p99 {r['kafka_probe_p99_ms']}), "
            f"{r['deliveries']}/{r['expected_deliveries']} "
            f"deliveries, gateway {r['gateway_cpu_cores_live']} cores "
            f"({r['gateway_cpu_us_per_delivery']} us CPU per delivery), RSS "
            f"{r['gateway_rss_live_mb']} MB (peak {r['gateway_rss_peak_mb']} MB), load "
            f"{r['load_avg_1m_before_after']}, errors {r['client_errors']}"
        )
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
