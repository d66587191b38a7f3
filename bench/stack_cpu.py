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
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import time
from typing import Any

import engine_bench as eb
import httpx
from benchlib import machine, save, summary
from weft_testkit import LocalStack


def _infra_pid(pattern: str) -> list[int]:
    found = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True).stdout
    return [int(p) for p in found.split()[:1]]


def _pids(stack: LocalStack) -> dict[str, list[int]]:
    pids = {name: stack.pids(name) for name in eb.SERVICES}
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--idle-seconds", type=float, default=5)
    parser.add_argument("--tool-workers", type=int, default=2)
    args = parser.parse_args()
    save("stack_cpu", asyncio.run(run(args.seconds, args.idle_seconds, args.tool_workers)))


if __name__ == "__main__":
    main()
