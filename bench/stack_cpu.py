"""CPU of every process of the stack per LLM round, while sequential turns run (issue 3).

The engine's round overhead on a 2-core machine is mostly time spent waiting for a core
while the other processes handle the same events (Kafka broker, gateway, memory,
tool-exec). This benchmark shows who spends it: it starts the stack of
``engine_bench.py`` (same agent, same ``rounds`` script: 3 tool rounds of one ``thinking``
call, then an answer), runs sequential turns for ``--seconds``, and prints each process's
CPU milliseconds per LLM round (utime + stime from ``/proc``, the Kafka broker and Redis
found by their command line), their idle CPU beforehand, and the round overhead
(``tool_result`` -> next ``tool_call`` event times) of those turns.

    .venv/bin/python bench/stack_cpu.py --seconds 20

``--ab`` measures what observability costs (issue 37): sequential turns on a stack with
metrics and tracing at their defaults (metrics server on, scraped every 15 s as Prometheus
would; tracing with the OTLP exporter on, to a local collector double that accepts and
drops, sampling at the default 0.1) and, at the same time, on a second stack with both off
(``WEFT_METRICS_PORT=0``, ``WEFT_TRACING_EXPORTER=none``). Running both side by side makes
the rest of the machine's load weigh on both alike (run one after the other, two runs of
the same mode differed by 15 % on the shared cores). It prints each process's CPU seconds
per turn in both, the ratio over the Weft processes (the LLM double, Kafka and Redis are
listed apart: Kafka and Redis are shared by both stacks and whatever else runs), and the
load average. ``--rounds`` repeats the pair, starting the other side first every other
round: an A/A run (``--on nothing``, both sides off) measured the stack started second at
+2 % (its gateway +12 %), so an even number of rounds cancels that bias.

    .venv/bin/python bench/stack_cpu.py --ab --seconds 60 --rounds 2
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import AsyncExitStack, ExitStack, contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import engine_bench as eb
import httpx
from benchlib import machine, save, summary
from weft_testkit import LocalStack, StackConfig
from weft_testkit.stack import SERVICES, WORKERS


def _infra_pid(pattern: str) -> list[int]:
    found = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True).stdout
    return [int(p) for p in found.split()[:1]]


def _pids(stack: LocalStack) -> dict[str, list[int]]:
    pids = {name: stack.pids(name) for name in (*WEFT, "scripted_llm")}
    pids["kafka"] = _infra_pid("kafka.Kafka")
    pids["redis"] = _infra_pid("redis-server")
    return pids


def _cpu(pids: dict[str, list[int]]) -> dict[str, float]:
    return {name: eb._cpu_s(p) for name, p in pids.items()}


async def run(seconds: float, idle_s: float, tool_workers: int) -> dict[str, Any]:
    with LocalStack(eb.stack_config("bench-stack-cpu", tool_workers)) as stack:
        headers = {"Authorization": f"Bearer {stack.api_key}"}
        async with (
            httpx.AsyncClient(base_url=stack.gateway_url, headers=headers, timeout=600) as api,
            httpx.AsyncClient(base_url=stack.llm_url) as llm,
        ):
            agent = await eb._agent(api)
            await llm.post("/_script", json={**eb.ROUNDS_SCRIPT, "parallel": 1})
            chat = eb.ChatClient(api)
            for i in range(3):
                await chat.turn(agent, f"warm-up {i}")
            pids = _pids(stack)
            before = _cpu(pids)
            await asyncio.sleep(idle_s)
            idle = {k: (v - before[k]) * 1000 / idle_s for k, v in _cpu(pids).items()}
            start = _cpu(pids)
            gaps: list[float] = []
            turns = 0
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline:
                events = await chat.turn(agent, f"stack cpu {turns}")
                turns += 1
                gaps += [(end - start) * 1000 for start, end in eb.round_windows(events)]
            end = _cpu(pids)
            await chat.aclose()
    rounds = turns * eb.LLM_CALLS_PER_TURN
    return {
        "machine": machine(),
        "seconds": seconds,
        "turns": turns,
        "cpu_ms_per_llm_round": {k: round((end[k] - start[k]) * 1000 / rounds, 2) for k in end},
        "idle_cpu_ms_per_s": {k: round(v, 1) for k, v in idle.items()},
        "tool_result_to_next_tool_call_ms": summary(gaps),
    }


WEFT = (*SERVICES, *WORKERS)
"""The Weft processes whose CPU the A/B compares and whose metrics it scrapes: every
service of the stack and its workers (agent-config and knowledge answer each turn's agent
resolution; the ingestion worker counts its queues whatever the load), not the LLM
double, Kafka or Redis."""

OFF = {"WEFT_METRICS_PORT": "0", "WEFT_TRACING_EXPORTER": "none"}
"""Metrics and tracing off."""


class _Collector(BaseHTTPRequestHandler):
    """An OTLP/HTTP collector double: reads each export, answers 200, keeps nothing."""

    exports = 0
    bytes = 0

    def do_POST(self) -> None:
        size = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(size)
        type(self).exports += 1
        type(self).bytes += size
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *_: Any) -> None:
        return


@contextmanager
def collector() -> Iterator[str]:
    """A local collector double; yields its OTLP endpoint."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Collector)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


async def _scrape(stack: LocalStack, every_s: float) -> None:
    """Scrape every process's metrics as Prometheus would (its default-ish 15 s)."""
    urls = [
        stack.metrics_url(name, i) for name in WEFT for i in range(len(stack.ports.get(name, [])))
    ]
    async with httpx.AsyncClient(timeout=10) as http:
        while True:
            for url in urls:
                await http.get(url)
            await asyncio.sleep(every_s)


@dataclasses.dataclass
class _Side:
    """One stack of the A/B and what runs turns on it."""

    stack: LocalStack
    api: httpx.AsyncClient
    chat: eb.ChatClient
    agent: str
    scrape_s: float | None
    turns: int = 0


async def _side(stack: LocalStack, scrape_s: float | None, exits: AsyncExitStack) -> _Side:
    headers = {"Authorization": f"Bearer {stack.api_key}"}
    api = await exits.enter_async_context(
        httpx.AsyncClient(base_url=stack.gateway_url, headers=headers, timeout=600)
    )
    async with httpx.AsyncClient(base_url=stack.llm_url) as llm:
        await llm.post("/_script", json={**eb.ROUNDS_SCRIPT, "parallel": 1})
    agent = await eb._agent(api)
    chat = eb.ChatClient(api)
    exits.push_async_callback(chat.aclose)
    for i in range(5):
        await chat.turn(agent, f"warm-up {i}")
    return _Side(stack, api, chat, agent, scrape_s)


async def _turns(side: _Side, until: float) -> None:
    while time.monotonic() < until:
        await side.chat.turn(side.agent, f"stack cpu {side.turns}")
        side.turns += 1


async def side_by_side(
    configs: dict[str, tuple[StackConfig, float | None]], seconds: float
) -> dict[str, dict[str, Any]]:
    """Sequential turns on one stack per mode, all at once over the same ``seconds``: the
    machine's load (other work on the shared cores) weighs on every mode alike. CPU seconds
    per turn of each process of each stack."""
    with ExitStack() as stacks:
        running = {m: stacks.enter_context(LocalStack(c)) for m, (c, _) in configs.items()}
        async with AsyncExitStack() as exits:
            sides = {m: await _side(running[m], configs[m][1], exits) for m in configs}
            scrapers = [
                asyncio.create_task(_scrape(side.stack, side.scrape_s))
                for side in sides.values()
                if side.scrape_s
            ]
            pids = {m: _pids(side.stack) for m, side in sides.items()}
            start = {m: _cpu(p) for m, p in pids.items()}
            until = time.monotonic() + seconds
            await asyncio.gather(*(_turns(side, until) for side in sides.values()))
            end = {m: _cpu(p) for m, p in pids.items()}
            for task in scrapers:
                task.cancel()
    results = {}
    for mode, side in sides.items():
        per_turn = {k: (end[mode][k] - start[mode][k]) / side.turns for k in end[mode]}
        results[mode] = {
            "turns": side.turns,
            "cpu_s_per_turn": {k: round(v, 5) for k, v in per_turn.items()},
            "weft_cpu_s_per_turn": round(sum(per_turn[k] for k in WEFT), 5),
        }
    return results


ON = {
    "both": {},
    "tracing": {"WEFT_METRICS_PORT": "0"},
    "metrics": {"WEFT_TRACING_EXPORTER": "none"},
    "nothing": OFF,
}
"""``--on``: what the "default" side turns on (both, or one of them to see who costs what;
``nothing``: an A/A run, both sides off, to see the noise between two identical stacks)."""


async def ab(seconds: float, tool_workers: int, rounds: int, on: str) -> dict[str, Any]:
    """Observability at its defaults (``on``) versus off, side by side, ``rounds`` times."""
    runs: dict[str, list[dict[str, Any]]] = {"off": [], "default": []}
    loads = []
    with collector() as endpoint:
        for i in range(rounds):
            configs: dict[str, tuple[StackConfig, float | None]] = {}
            for mode, env, scrape_s in (
                ("off", OFF, None),
                (
                    "default",
                    {"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, **ON[on]},
                    None if on in ("tracing", "nothing") else 15.0,
                ),
            ):
                base = eb.stack_config(f"bench-stack-cpu-{mode}", tool_workers)
                extra_env = {**base.extra_env, **env}
                configs[mode] = (dataclasses.replace(base, extra_env=extra_env), scrape_s)
            if i % 2:  # an A/A run showed the second stack started costing ~2 % more
                configs = dict(reversed(configs.items()))  # (its gateway ~12 %): alternate
            result = await side_by_side(configs, seconds)
            loads.append(round(os.getloadavg()[0], 2))
            for mode, measured in result.items():
                runs[mode].append(measured)
            print(i, {m: r["weft_cpu_s_per_turn"] for m, r in result.items()}, flush=True)
    mean = {
        mode: {
            k: round(sum(r["cpu_s_per_turn"][k] for r in rs) / len(rs), 5)
            for k in rs[0]["cpu_s_per_turn"]
        }
        for mode, rs in runs.items()
    }
    weft = {mode: sum(mean[mode][k] for k in WEFT) for mode in mean}
    return {
        "machine": machine(),
        "load_avg_1m_after_each_round": loads,
        "seconds_per_round": seconds,
        "rounds": rounds,
        "sample_ratio": "default (0.1)",
        "on": on,
        "collector_exports": _Collector.exports,
        "collector_bytes": _Collector.bytes,
        "cpu_s_per_turn": mean,
        "weft_cpu_s_per_turn": {m: round(v, 5) for m, v in weft.items()},
        "weft_ratio_default_over_off": round(weft["default"] / weft["off"], 4),
        "weft_ratio_per_round": [
            round(d["weft_cpu_s_per_turn"] / o["weft_cpu_s_per_turn"], 4)
            for o, d in zip(runs["off"], runs["default"], strict=True)
        ],
        "per_process_ratio": {
            k: round(mean["default"][k] / mean["off"][k], 3) if mean["off"][k] else None
            for k in mean["off"]
        },
        "runs": runs,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--idle-seconds", type=float, default=5)
    parser.add_argument("--tool-workers", type=int, default=2)
    parser.add_argument("--ab", action="store_true", help="observability on vs off")
    parser.add_argument("--rounds", type=int, default=1, help="A/B pairs")
    parser.add_argument("--on", choices=sorted(ON), default="both", help="what --ab turns on")
    args = parser.parse_args()
    if args.ab:
        result = asyncio.run(ab(args.seconds, args.tool_workers, args.rounds, args.on))
        save("stack_cpu_ab" if args.on == "both" else f"stack_cpu_ab_{args.on}", result)
        return
    save("stack_cpu", asyncio.run(run(args.seconds, args.idle_seconds, args.tool_workers)))


if __name__ == "__main__":
    main()
