"""Engine benchmarks (issue 3): per-round overhead and concurrent-turn throughput.

Starts its own stack (all services as processes, scripted LLM test double with no added
latency, `rounds` policy: R tool rounds of P parallel calls of the trivial read-only
`thinking` tool, then a short answer) on the real Kafka/PostgreSQL/Redis. The turns run on
a custom agent whose only tool is `thinking`, so neither hybrid search nor a single tool
worker is what gets measured.

- overhead: sequential turns (3 rounds x 1 call). Per round, the time from the engine
  emitting `tool_result` to it emitting the next `tool_call` (engine handling + one
  scripted-LLM HTTP round trip + Kafka), and from the engine emitting the first answer
  delta to the SSE client receiving it. The round gap is also cut in two where the test
  double logged the round's LLM request (its request log, after reading the body): the
  engine's part up to the call plus the request's way in, then the double's answer, the
  stream's parsing and the dispatching write. Also the engine's CPU time per LLM round, a
  number that machine load disturbs far less than wall-clock gaps, and the scripted LLM's
  CPU time per call (the test double shares the machine's cores).
- throughput: N concurrent sessions, each a 3-round turn with 2 parallel calls per round;
  turns/s, p50/p99 turn latency and the engine's RSS sampled every 200 ms.

    .venv/bin/python bench/engine_bench.py --sessions 50 200 500 --tool-workers 2
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import aiohttp
import httpx
from benchlib import percentile, summary
from weft_testkit import LocalStack, StackConfig

REPO = Path(__file__).resolve().parents[1]
TOOL = "thinking"
TOOL_ARGUMENTS = {
    "thought": "benchmark step",
    "next_thought_needed": True,
    "thought_number": 1,
    "total_thoughts": 3,
}
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
ROUNDS_SCRIPT = {
    "fallback": "rounds",
    "rounds": 3,
    "rounds_tool": TOOL,
    "rounds_arguments": TOOL_ARGUMENTS,
}
"""The test double's script: 3 tool rounds of ``parallel`` ``thinking`` calls, then text."""
LLM_CALLS_PER_TURN = 4  # 3 tool rounds + the answer


def _epoch(iso: str) -> float:
    return datetime.fromisoformat(iso).timestamp()


async def _agent(api: httpx.AsyncClient) -> str:
    """A custom agent whose only tool is the trivial ``thinking`` tool."""
    body = {
        "name": "engine bench",
        "mode": "smart-reasoning",
        "allowed_tools": [TOOL],
        "max_iterations": 10,
    }
    response = await api.post("/api/v1/agents", json=body)
    response.raise_for_status()
    return str(response.json()["id"])


async def _session(api: httpx.AsyncClient, agent: str) -> str:
    response = await api.post("/api/v1/sessions", json={"agent_id": agent})
    if response.status_code != 201:
        raise RuntimeError(f"session: HTTP {response.status_code} {response.text[:120]}")
    return str(response.json()["id"])


class ChatClient:
    """Runs chat turns: the session through the gateway's API (httpx), the turn's SSE
    stream read with aiohttp, whose C HTTP parser costs this process a fraction of what
    httpx and httpx-sse spent per event (3.6 ms of CPU per LLM round, on the same two
    cores as the stack it measures; a real client runs on another machine)."""

    def __init__(self, api: httpx.AsyncClient):
        self.api = api
        self._stream = aiohttp.ClientSession(
            str(api.base_url),
            headers={"Authorization": api.headers["authorization"]},
            connector=aiohttp.TCPConnector(limit=0),  # the throughput runs' 500 streams
            timeout=aiohttp.ClientTimeout(total=900),
            read_bufsize=2**20,
        )

    async def aclose(self) -> None:
        await self._stream.close()

    async def turn(
        self, agent: str, query: str, session_id: str | None = None
    ) -> list[tuple[str, dict[str, Any], float]]:
        """The turn's events up to ``complete``: (type, envelope, receipt epoch seconds)."""
        session_id = session_id or await _session(self.api, agent)
        path = f"/api/v1/agent-chat/{session_id}"
        async with self._stream.post(path, json={"query": query}) as response:
            if response.content_type != "text/event-stream":
                body = (await response.read()).decode(errors="replace")
                raise RuntimeError(f"agent-chat: HTTP {response.status} {body[:160]}")
            return await _read_events(response.content)


async def _read_events(content: aiohttp.StreamReader) -> list[tuple[str, dict[str, Any], float]]:
    """SSE ``event:`` / ``data:`` lines (the gateway's data is one JSON line) until
    ``complete``."""
    events: list[tuple[str, dict[str, Any], float]] = []
    kind = ""
    async for raw in content:
        line = raw.rstrip(b"\r\n")
        if line.startswith(b"event:"):
            kind = line[6:].strip().decode()
        elif line.startswith(b"data:") and kind:
            events.append((kind, json.loads(line[5:]), time.time()))
            if kind == "complete":
                break
        elif not line:
            kind = ""
    return events


def _cpu_s(pids: list[int]) -> float:
    """User + system CPU seconds of the processes so far."""
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / CLOCK_TICKS


async def overhead(
    chat: ChatClient, llm: httpx.AsyncClient, stack: LocalStack, agent: str, turns: int
) -> dict[str, Any]:
    round_gaps: list[float] = []
    windows: list[tuple[float, float]] = []
    first_token: list[float] = []
    await chat.turn(agent, "warm-up")
    cpu_before = _cpu_s(stack.pids("engine"))
    llm_before = _cpu_s(stack.pids("scripted_llm"))
    own_before = time.process_time()
    for i in range(turns):
        events = await chat.turn(agent, f"overhead {i}")
        for start, end in round_windows(events):
            windows.append((start, end))
            round_gaps.append((end - start) * 1000)
        answer = next(e for e in events if e[0] == "final_answer")
        first_token.append((answer[2] - _epoch(answer[1]["time"])) * 1000)
    cpu = _cpu_s(stack.pids("engine")) - cpu_before
    llm_cpu = _cpu_s(stack.pids("scripted_llm")) - llm_before
    llm_calls = turns * LLM_CALLS_PER_TURN
    return {
        "turns": turns,
        "engine_cpu_ms_per_llm_round": round(cpu * 1000 / llm_calls, 1),
        # The test double runs on the same CPUs: its share of each round, for comparison.
        "scripted_llm_cpu_ms_per_call": round(llm_cpu * 1000 / llm_calls, 1),
        "bench_client_cpu_ms_per_llm_round": round(
            (time.process_time() - own_before) * 1000 / llm_calls, 1
        ),
        "tool_result_to_next_tool_call_ms": summary(round_gaps),
        **await _round_split(llm, windows),
        "first_answer_token_to_sse_client_ms": summary(first_token),
    }


async def _round_split(
    llm: httpx.AsyncClient, windows: list[tuple[float, float]]
) -> dict[str, dict[str, Any]]:
    """Each round's gap cut where the test double logged the round's LLM request (after
    reading its body) and where it handed its answer to its server: before, the engine's
    bookkeeping up to the call and the request's way in; the double's own service time;
    after, the answer's way back, the stream's parsing and the write that dispatches the
    tools. The gap without the double's service time is the part a faster model could
    not remove. The double also stamps when the request entered its app (before routing
    and the body) and when the response's last byte left it: the gap outside the double
    is the engine's overhead with a model that takes no time at all, loopback included.
    Rounds the log does not place exactly once are left out."""
    entries = (await llm.get("/_requests")).json()["requests"]
    calls = [
        (e["received_at"], e["answered_at"], e["entered_at"], e["sent_at"])
        for e in entries
        if e["path"].endswith("/chat/completions") and e["answered_at"] is not None
    ]
    before: list[float] = []
    service: list[float] = []
    after: list[float] = []
    without: list[float] = []
    in_app: list[float] = []
    outside: list[float] = []
    for start, end in windows:
        inside = [c for c in calls if start <= c[0] and c[1] <= end]
        if len(inside) != 1:
            continue
        received, answered, entered, sent = inside[0]
        before.append((received - start) * 1000)
        service.append((answered - received) * 1000)
        after.append((end - answered) * 1000)
        without.append((end - start - (answered - received)) * 1000)
        if entered is not None and sent is not None:
            in_app.append((sent - entered) * 1000)
            outside.append((end - start - (sent - entered)) * 1000)
    return {
        "tool_result_to_llm_request_received_ms": summary(before),
        "scripted_llm_service_ms": summary(service),
        "llm_answer_handed_over_to_tool_call_ms": summary(after),
        "round_gap_without_scripted_llm_service_ms": summary(without),
        "scripted_llm_in_app_ms": summary(in_app),
        "round_gap_outside_scripted_llm_app_ms": summary(outside),
    }


def round_windows(events: list[tuple[str, dict[str, Any], float]]) -> list[tuple[float, float]]:
    """Per tool round of a turn's events: the ``tool_result`` event's time and the next
    ``tool_call`` event's time (epoch seconds, as the engine stamped them)."""
    return [
        (_epoch(env["time"]), _epoch(next_env["time"]))
        for (kind, env, _), (next_kind, next_env, _) in itertools.pairwise(events)
        if kind == "tool_result" and next_kind == "tool_call"
    ]


def _rss_mb(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                total += int(line.split()[1])
    return total / 1024


SERVICES = ("engine", "gateway", "memory", "tool_exec", "scripted_llm", "suggestions")


def _cpu_by_service(stack: LocalStack) -> dict[str, float]:
    """CPU seconds used so far by each service's processes (which one is the bottleneck)."""
    return {name: _cpu_s(stack.pids(name)) for name in SERVICES}


async def throughput(
    chat: ChatClient, stack: LocalStack, agent: str, sessions: int
) -> dict[str, Any]:
    samples: list[float] = []
    stop = asyncio.Event()

    async def sample() -> None:
        while not stop.is_set():
            samples.append(_rss_mb(stack.pids("engine")))
            await asyncio.sleep(0.2)

    # Sessions first (20 at a time): the turns, not a burst of session creations, are measured.
    gate = asyncio.Semaphore(20)

    async def new_session() -> str:
        async with gate:
            return await _session(chat.api, agent)

    session_ids = await asyncio.gather(*(new_session() for _ in range(sessions)))
    sampler = asyncio.create_task(sample())
    cpu_before = _cpu_by_service(stack)
    started = time.monotonic()

    async def one(i: int) -> tuple[float, str]:
        t0 = time.monotonic()
        events = await chat.turn(agent, f"throughput {i}", session_ids[i])
        return time.monotonic() - t0, events[-1][1]["data"]["status"]

    results = await asyncio.gather(*(one(i) for i in range(sessions)), return_exceptions=True)
    wall = time.monotonic() - started
    cpu_after = _cpu_by_service(stack)
    stop.set()
    await sampler
    ok = [r for r in results if isinstance(r, tuple) and r[1] == "completed"]
    failures = sorted({repr(r)[:160] for r in results if not isinstance(r, tuple)})[:3]
    latencies = [r[0] * 1000 for r in ok]
    return {
        "sessions": sessions,
        "completed": len(ok),
        "errors": sessions - len(ok),
        "wall_s": round(wall, 2),
        "turns_per_s": round(len(ok) / wall, 2),
        "turn_latency_ms": {"p50": percentile(latencies, 0.5), "p99": percentile(latencies, 0.99)}
        if ok
        else {},
        "engine_rss_mb": {"start": round(samples[0], 1), "peak": round(max(samples), 1)},
        "cpu_s_by_service": {
            name: round(cpu_after[name] - cpu_before.get(name, 0.0), 1) for name in cpu_after
        },
        "http_503": sum(1 for r in results if "HTTP 503" in repr(r)),
        "first_errors": failures,
    }


def stack_config(log_name: str, tool_workers: int) -> StackConfig:
    """The benchmark stack: 6 partitions, ``tool_workers`` tool-exec processes."""
    return StackConfig(
        log_dir=REPO / ".weft" / "logs" / log_name,
        partitions=6,
        replicas={"tool_exec": tool_workers},
        # The gateway's per-tenant limits (20 turns, 600 requests/min) would turn the
        # concurrency test into a 429 test: lift them for this stack.
        extra_env={"WEFT_MAX_CONCURRENT_TURNS": "10000", "WEFT_RATE_LIMIT_PER_MINUTE": "0"},
    )


async def run(turns: int, sessions: list[int], tool_workers: int) -> dict[str, Any]:
    with LocalStack(stack_config("bench-engine", tool_workers)) as stack:
        headers = {"Authorization": f"Bearer {stack.api_key}"}
        limits = httpx.Limits(max_connections=2000, max_keepalive_connections=2000)
        async with (
            httpx.AsyncClient(
                base_url=stack.gateway_url, headers=headers, timeout=600, limits=limits
            ) as api,
            httpx.AsyncClient(base_url=stack.llm_url) as llm,
        ):
            agent = await _agent(api)
            await llm.post("/_script", json={**ROUNDS_SCRIPT, "parallel": 1})
            chat = ChatClient(api)
            try:
                result: dict[str, Any] = {
                    "load_average_at_start": os.getloadavg(),
                    "tool_workers": tool_workers,
                    "overhead": await overhead(chat, llm, stack, agent, turns),
                }
                await llm.post("/_script", json={**ROUNDS_SCRIPT, "parallel": 2})
                result["throughput"] = [await throughput(chat, stack, agent, n) for n in sessions]
                result["load_average_at_end"] = os.getloadavg()
            finally:
                await chat.aclose()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--sessions", type=int, nargs="*", default=[50, 200, 500])
    parser.add_argument("--tool-workers", type=int, default=2)
    parser.add_argument(
        "--out", type=Path, default=REPO / "bench" / "results" / "engine_bench.json"
    )
    args = parser.parse_args()
    result = asyncio.run(run(args.turns, args.sessions, args.tool_workers))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
