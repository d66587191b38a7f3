"""Time from ``POST /agent-chat`` to the first SSE event and to ``complete``.

Starts its own stack (7 services + the scripted LLM test double, demo policy) on the real
Kafka/PostgreSQL/Redis, loads the sample KB, runs N sequential turns (one warm-up turn
first, not counted) and prints the median and p90. Writes ``bench/results/turn_latency.json``.

    .venv/bin/python bench/turn_latency.py --turns 20
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import statistics
import time
from datetime import datetime
from pathlib import Path

import httpx
from weft_testkit import LocalStack, StackConfig, read_turn

REPO = Path(__file__).resolve().parents[1]
QUESTIONS = [
    "How long do I have to get a refund on an annual plan?",
    "Which payment methods are accepted?",
    "What availability does the Business plan guarantee?",
    "Where is customer data stored?",
]


async def _load_kb(api: httpx.AsyncClient) -> str:
    kb_id = str((await api.post("/api/v1/knowledge-bases", json={"name": "bench"})).json()["id"])
    for doc in sorted((REPO / "deploy" / "sample-kb").glob("*.md")):
        body = {"title": doc.stem, "content": doc.read_text()}
        (await api.post(f"/api/v1/knowledge-bases/{kb_id}/documents", json=body)).raise_for_status()
    return kb_id


async def _one_turn(
    api: httpx.AsyncClient, stack: LocalStack, kb_id: str, q: str
) -> dict[str, float]:
    session = (
        await api.post("/api/v1/sessions", json={"agent_id": "builtin-smart-reasoning"})
    ).json()
    started, started_wall = time.monotonic(), time.time()
    events = await read_turn(
        api, f"/api/v1/agent-chat/{session['id']}", api_key=stack.api_key,
        json_body={"query": q, "knowledge_base_ids": [kb_id]},
    )  # fmt: skip
    if events[-1].data["data"]["status"] != "completed":
        raise RuntimeError(f"turn did not complete: {events[-1].data}")
    produced = datetime.fromisoformat(events[0].data["time"]).timestamp()
    return {
        "first_event_ms": (events[0].received_at - started) * 1000,
        # where the first event's time goes: POST -> engine produced it (gateway checks,
        # Kafka, engine intake) and produced -> client (projector, Redis, fan-out)
        "post_to_produced_ms": (produced - started_wall) * 1000,
        "produced_to_client_ms": (events[0].received_at - started) * 1000
        - (produced - started_wall) * 1000,
        "complete_ms": (events[-1].received_at - started) * 1000,
        "events": float(len(events)),
    }


async def run(turns: int) -> dict[str, object]:
    with LocalStack(StackConfig(log_dir=REPO / ".weft" / "logs" / "bench")) as stack:
        headers = {"Authorization": f"Bearer {stack.api_key}"}
        async with httpx.AsyncClient(
            base_url=stack.gateway_url, headers=headers, timeout=120
        ) as api:
            kb_id = await _load_kb(api)
            await _one_turn(api, stack, kb_id, QUESTIONS[0])  # warm-up
            samples = [
                await _one_turn(api, stack, kb_id, QUESTIONS[i % len(QUESTIONS)])
                for i in range(turns)
            ]
    first = [s["first_event_ms"] for s in samples]
    done = [s["complete_ms"] for s in samples]
    return {
        "benchmark": "turn_latency",
        "turns": turns,
        "llm": "scripted test double, demo policy (search_knowledge then cited answer)",
        "machine": {"cpus": _cpus(), "python": platform.python_version()},
        "first_event_ms": _summary(first),
        "first_event_post_to_produced_ms": _summary([s["post_to_produced_ms"] for s in samples]),
        "first_event_produced_to_client_ms": _summary(
            [s["produced_to_client_ms"] for s in samples]
        ),
        "complete_ms": _summary(done),
        "events_per_turn": statistics.median(s["events"] for s in samples),
    }


def _summary(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "median": round(statistics.median(ordered), 1),
        "p90": round(ordered[int(0.9 * (len(ordered) - 1))], 1),
        "min": round(ordered[0], 1),
        "max": round(ordered[-1], 1),
    }


def _cpus() -> int:
    import os

    return os.cpu_count() or 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument(
        "--out", type=Path, default=REPO / "bench" / "results" / "turn_latency.json"
    )
    args = parser.parse_args()
    result = asyncio.run(run(args.turns))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    fe, cm = result["first_event_ms"], result["complete_ms"]
    print(f"turns: {args.turns} (scripted LLM, demo policy, one tool round)")
    print(f"POST -> first SSE event: median {fe['median']} ms, p90 {fe['p90']} ms")  # type: ignore[index]
    print(f"POST -> complete:        median {cm['median']} ms, p90 {cm['p90']} ms")  # type: ignore[index]
    pp = result["first_event_post_to_produced_ms"]
    pc = result["first_event_produced_to_client_ms"]
    print(f"  first event: POST -> produced median {pp['median']} ms,")  # type: ignore[index]
    print(f"  produced -> client median {pc['median']} ms")  # type: ignore[index]
    print(f"written: {args.out}")


if __name__ == "__main__":
    main()
