"""How long a record that arrives after a quiet spell waits for a batch consumer (issue 3).

The gateway's projector (the SSE path) and the suggestions service read ``agent.events``
in batches. With a real model the events of a turn come in bursts separated by seconds
of thinking, so what matters is the first record after a pause. FastStream 0.7's batch
subscriber sleeps ``batch_timeout_ms`` after every empty fetch, and a record arriving
during that sleep waits for it; ``weft_platform.bus.PromptBatchSubscriber`` does not.

Two consumers in their own groups read the same records from one topic: FastStream's
own batch subscriber, and ``EventBus.consume_batch`` (what the services run), both with
a 100 ms batch timeout. Records are published one at a time after random pauses; each
consumer's latency is its handler's clock minus the record's envelope time (one host).

    .venv/bin/python bench/batch_idle_latency.py --records 60
"""

from __future__ import annotations

import argparse
import asyncio
import random
import secrets
import time
from typing import Any

from benchlib import machine, save, summary
from faststream.kafka import KafkaBroker
from weft_contracts import ThoughtData, ThoughtEvent, Topic
from weft_platform.runtime import create_runtime
from weft_platform.settings import KafkaAccess, ServiceSettings
from weft_platform.topics import delete_topics, ensure_topics
from weft_testkit import infra_env
from weft_testkit.credentials import DevCredentials, credentials_dir
from weft_testkit.kafka import settings_fields

BATCH_TIMEOUT_MS = 100


async def run(records: int, pause_s: tuple[float, float]) -> dict[str, Any]:
    env = infra_env()
    prefix = f"bench{secrets.token_hex(4)}."
    access = KafkaAccess(**settings_fields(env))  # type: ignore[arg-type]
    await ensure_topics(access, {"WEFT_TOPIC_PARTITIONS": "1"}, prefix=prefix)
    settings = ServiceSettings(
        service_name="bench-batch",
        **settings_fields(env),  # type: ignore[arg-type]
        redis_url=env["WEFT_REDIS_URL"],
        database_url=env["WEFT_DATABASE_URL"],
        topic_prefix=prefix,
        credentials_dir=str(credentials_dir()),
    )
    runtime = create_runtime(settings)
    credential = DevCredentials.load().request("bench", session_id="s", request_id="r")
    stock = KafkaBroker(access.kafka_bootstrap, security=access.faststream_security())
    waited: dict[str, list[float]] = {"faststream_batch_subscriber": [], "weft_consume_batch": []}
    joined = {name: asyncio.Event() for name in waited}
    """Set once the consumer read a record: its group has joined and been assigned."""

    async def on_bus(events: list[Any]) -> None:
        now = time.time()
        waited["weft_consume_batch"] += [(now - e.time.timestamp()) * 1000 for e in events]
        joined["weft_consume_batch"].set()

    @stock.subscriber(
        runtime.bus.topic_name(Topic.AGENT_EVENTS),
        batch=True,
        batch_timeout_ms=BATCH_TIMEOUT_MS,
        group_id=f"{prefix}stock",
        auto_offset_reset="earliest",
    )
    async def on_stock(bodies: list[dict[str, Any]]) -> None:
        now = time.time()
        for body in bodies:
            sent = ThoughtEvent.model_validate(body).time.timestamp()
            waited["faststream_batch_subscriber"].append((now - sent) * 1000)
        joined["faststream_batch_subscriber"].set()

    runtime.bus.consume_batch(Topic.AGENT_EVENTS, "bench-batch", on_bus, wait_ms=BATCH_TIMEOUT_MS)
    try:
        await runtime.broker.start()
        await stock.start()
        for n in range(records + 1):
            event = ThoughtEvent(
                tenant_id="bench", session_id="s", request_id="r", seq=n,
                credential=credential, data=ThoughtData(round=0, delta="x"),
            )  # fmt: skip
            await runtime.bus.publish(Topic.AGENT_EVENTS, event)
            if n == 0:  # both groups joined and read the first record: start measuring
                async with asyncio.timeout(60):
                    await asyncio.gather(*(event.wait() for event in joined.values()))
                for values in waited.values():
                    values.clear()
            await asyncio.sleep(random.uniform(*pause_s))
    finally:
        await stock.stop()
        await runtime.broker.stop()
        await runtime.redis.aclose()
        await runtime.db.dispose()
        await delete_topics(access, prefix)
    return {
        "machine": machine(),
        "records": records,
        "pause_s": list(pause_s),
        "batch_timeout_ms": BATCH_TIMEOUT_MS,
        "wait_ms": {
            name: {**summary(values, (0.5, 0.9)), "max": round(max(values), 1)}
            for name, values in waited.items()
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=60)
    parser.add_argument("--min-pause", type=float, default=0.25)
    parser.add_argument("--max-pause", type=float, default=0.6)
    args = parser.parse_args()
    result = asyncio.run(run(args.records, (args.min_pause, args.max_pause)))
    save("batch_idle_latency", result)


if __name__ == "__main__":
    main()
