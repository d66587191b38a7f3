"""Suggestions benchmark (SPEC Q-01, Q-04): follow-ups after ``complete``, three replicas.

Starts its own stack with three suggestions replicas (the scripted LLM test double
answers every follow-up request at once with a JSON array) on the real Kafka/PostgreSQL/
Redis, and plays the engine: it publishes ``turn_started`` + ``complete`` of N turns
(signed with each turn's credential) on the stack's ``agent.events``, and reads
``weft.session.notices.v1``.

- latency: turns at a steady rate; per turn, from the ack of its ``complete`` to this
  process receiving its ``suggestions_ready`` record (Kafka both ways, the replicas'
  200 ms fetch linger, a claim, the model call, the stored set): p50/p99 in ms.
- throughput: a burst of turns published at once; generations per second over the
  burst, and per replica (divided by the replicas that generated).
- duplicates: sets stored vs. turns (``message_suggestion_sets`` rows and the sum of
  their ``generations``) and model calls seen by the test double: with three replicas
  every set is generated exactly once, so all three equal the number of turns.

    .venv/bin/python bench/suggestions.py --latency-turns 60 --burst 300
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from benchlib import machine, save, summary
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine
from weft_contracts import (
    CompleteData,
    CompleteEvent,
    Topic,
    TurnStartedData,
    TurnStartedEvent,
    TurnStatus,
)
from weft_platform.kafka_acls import SUPER_USER
from weft_testkit import LocalStack, StackConfig, infra_env
from weft_testkit.kafka import client_options, principal_env
from weft_testkit.llm_log import chat_requests

REPO = Path(__file__).resolve().parents[1]
REPLICAS = 3
FOLLOW_UPS = {"enabled": True, "mode": "generated", "count": 3}
ANSWER = json.dumps(
    [{"text": t, "category": "deepen"} for t in ("Is VAT included?", "Can I pay yearly?")]
)


class Player:
    """Publishes turns as the engine would and collects their notices."""

    def __init__(self, stack: LocalStack, producer: AIOKafkaProducer):
        self.stack = stack
        self.producer = producer
        self.tenant = "bench-sugg-" + secrets.token_hex(3)
        self.completed: dict[str, float] = {}
        self.ready: dict[str, float] = {}
        self.states: dict[str, str] = {}
        self.all_ready = asyncio.Event()
        self.expected = 0

    async def turn(self) -> None:
        session, request = "s-" + secrets.token_hex(6), "r-" + secrets.token_hex(6)
        credential = self.stack.credentials.request(self.tenant, "u1", session, request)
        ids = {"tenant_id": self.tenant, "session_id": session, "request_id": request}
        started = TurnStartedEvent(
            **ids, seq=1, credential=credential,
            data=TurnStartedData(query="How much is the plan?", user_id="u1", agent_id="a1"),
        )  # fmt: skip
        complete = CompleteEvent(
            **ids, seq=2, credential=credential,
            data=CompleteData(status=TurnStatus.COMPLETED, final_answer="20 euros a month."),
        )  # fmt: skip
        await self._send(started)
        await self._send(complete)
        self.completed[request] = time.monotonic()

    async def _send(self, event: TurnStartedEvent | CompleteEvent) -> None:
        topic = self.stack.prefix + Topic.AGENT_EVENTS.value
        headers = [("type", event.type.encode()), ("content-type", b"application/json")]
        await self.producer.send_and_wait(
            topic, event.model_dump_json().encode(), key=event.key(), headers=headers
        )

    async def follow(self, consumer: AIOKafkaConsumer) -> None:
        async for record in consumer:
            notice = json.loads(record.value)
            if notice.get("tenant_id") != self.tenant:
                continue
            request = notice["request_id"]
            self.ready.setdefault(request, time.monotonic())
            self.states[request] = notice["data"]["state"]
            if len(self.ready) >= self.expected:
                self.all_ready.set()


async def _latency(player: Player, turns: int, rate: float) -> list[float]:
    before = set(player.completed)
    player.expected = len(player.ready) + turns
    player.all_ready.clear()
    for _ in range(turns):
        await player.turn()
        await asyncio.sleep(1 / rate)
    await asyncio.wait_for(player.all_ready.wait(), 300)
    mine = [r for r in player.completed if r not in before]
    return [(player.ready[r] - player.completed[r]) * 1000 for r in mine]


async def _burst(player: Player, turns: int) -> dict[str, Any]:
    player.expected = len(player.ready) + turns
    player.all_ready.clear()
    started = time.monotonic()
    await asyncio.gather(*(player.turn() for _ in range(turns)))
    published = time.monotonic()
    await asyncio.wait_for(player.all_ready.wait(), 600)
    elapsed = time.monotonic() - started
    return {
        "turns": turns,
        "publish_s": round(published - started, 2),
        "all_ready_s": round(elapsed, 2),
        "generations_per_s": round(turns / elapsed, 1),
        "generations_per_s_per_replica": round(turns / elapsed / REPLICAS, 1),
    }


async def _stored(stack: LocalStack, tenant: str) -> dict[str, int]:
    engine = create_async_engine(infra_env()["WEFT_DATABASE_URL"])
    try:
        async with engine.connect() as conn:
            row = (
                await conn.execute(
                    text(
                        "SELECT count(*), coalesce(sum(generations), 0) "
                        "FROM message_suggestion_sets WHERE tenant_id = :t"
                    ),
                    {"t": tenant},
                )
            ).one()
    finally:
        await engine.dispose()
    return {"sets": int(row[0]), "generations": int(row[1])}


async def run(args: argparse.Namespace) -> dict[str, Any]:
    home = Path(os.environ.get("WEFT_HOME", REPO / ".weft"))
    config = StackConfig(
        log_dir=home / "logs" / "bench-suggestions",
        replicas={"suggestions": REPLICAS},
        extra_env={"WEFT_FOLLOW_UPS": json.dumps(FOLLOW_UPS)},
    )
    load_before = machine()
    with LocalStack(config) as stack:
        async with httpx.AsyncClient(base_url=stack.llm_url, timeout=30) as llm:
            await llm.post("/_reset")
            script = {"steps": [], "fallback": "rounds", "rounds": 0, "rounds_answer": ANSWER}
            (await llm.post("/_script", json=script)).raise_for_status()
            options = client_options(principal_env(infra_env(), SUPER_USER))
            producer = AIOKafkaProducer(**options, acks="all", linger_ms=0)
            consumer = AIOKafkaConsumer(
                stack.prefix + Topic.SESSION_NOTICES.value,
                **options,
                auto_offset_reset="earliest",
            )
            await producer.start()
            await consumer.start()
            player = Player(stack, producer)
            following = asyncio.create_task(player.follow(consumer))
            try:
                await _latency(player, 5, args.rate)  # warm-up: connections, caches
                latencies = await _latency(player, args.latency_turns, args.rate)
                burst = await _burst(player, args.burst)
                await asyncio.sleep(2)  # a late duplicate would show up here
                calls = [
                    r for r in await chat_requests(llm)
                    if "Suggest the follow-up questions now" in json.dumps(r["messages"])
                ]  # fmt: skip
            finally:
                following.cancel()
                await consumer.stop()
                await producer.stop()
        turns = len(player.completed)
        stored = await _stored(stack, player.tenant)
    return {
        "date": datetime.now().isoformat(timespec="seconds"),
        "machine_before": load_before,
        "machine_after": machine(),
        "replicas": REPLICAS,
        "complete_to_suggestions_ready_ms": summary(latencies),
        "burst": burst,
        "turns": turns,
        "notices": len(player.ready),
        "states": {s: list(player.states.values()).count(s) for s in set(player.states.values())},
        "model_calls": len(calls),
        **stored,
        "duplicate_generations": max(stored["generations"] - turns, len(calls) - turns, 0),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency-turns", type=int, default=60)
    parser.add_argument("--rate", type=float, default=10.0, help="turns per second")
    parser.add_argument("--burst", type=int, default=300)
    args = parser.parse_args()
    result = asyncio.run(run(args))
    save(f"suggestions-{datetime.now():%Y%m%d-%H%M}", result)


if __name__ == "__main__":
    main()
