"""What Kafka logins cost a service: SASL/SCRAM-SHA-512 with ACLs against plaintext.

For each broker: the time to open a producer (the SCRAM exchange happens per connection),
the latency of an acknowledged publish (``acks=all``) and of publish -> consume through a
consumer group, and this process's CPU per record (client side: what every service pays).
Both brokers are local single nodes run by ``deploy/local/infra.sh``, one formatted with
``WEFT_KAFKA_SECURITY=plaintext``, one with ``sasl``; the client logs in as ``weft-engine``,
which may write and read ``agent.events`` (in its group ``weft-engine``).

    WEFT_HOME=/tmp/plain WEFT_KAFKA_SECURITY=plaintext WEFT_KAFKA_PORT=29094 \\
        WEFT_KAFKA_CONTROLLER_PORT=29095 deploy/local/infra.sh up kafka
    .venv/bin/python bench/kafka_sasl.py --plaintext-home /tmp/plain --sasl-home .weft
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import time
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from benchlib import machine, save, summary
from pydantic import SecretStr
from weft_contracts import Topic
from weft_platform.settings import KafkaAccess
from weft_platform.topics import delete_topics, ensure_topics


def _logins(home: Path) -> tuple[KafkaAccess, KafkaAccess]:
    """The super user's and weft-engine's settings for the broker infra.sh runs in ``home``."""
    data = home / "data"
    client = dict(line.split("=", 1) for line in (data / "kafka-client.env").read_text().split())
    admin = KafkaAccess(
        kafka_bootstrap=client["WEFT_KAFKA_BOOTSTRAP"],
        kafka_security_protocol=client["WEFT_KAFKA_SECURITY_PROTOCOL"],
        kafka_username=client.get("WEFT_KAFKA_USERNAME", ""),
        kafka_password=SecretStr(client.get("WEFT_KAFKA_PASSWORD", "")),
    )
    if not admin.uses_sasl:
        return admin, admin
    users = dict(line.split() for line in (data / "kafka-users").read_text().splitlines())
    engine = admin.model_copy(
        update={"kafka_username": "weft-engine", "kafka_password": SecretStr(users["weft-engine"])}
    )
    return admin, engine


async def _connect_ms(access: KafkaAccess, times: int) -> list[float]:
    took = []
    for _ in range(times):
        started = time.perf_counter()
        producer = AIOKafkaProducer(**access.client_options())
        await producer.start()
        took.append((time.perf_counter() - started) * 1000)
        await producer.stop()
    return took


async def _traffic(access: KafkaAccess, prefix: str, records: int) -> dict[str, Any]:
    topic = prefix + Topic.AGENT_EVENTS
    producer = AIOKafkaProducer(**access.client_options(), acks="all", linger_ms=0)
    consumer = AIOKafkaConsumer(
        topic, **access.client_options(), group_id=prefix + "weft-engine",
        auto_offset_reset="earliest",
    )  # fmt: skip
    await producer.start()
    await consumer.start()
    acked: list[float] = []
    delivered: list[float] = []
    try:
        cpu, wall = time.process_time(), time.perf_counter()
        for i in range(records):
            started = time.perf_counter()
            await producer.send_and_wait(topic, f"{started:.9f}".encode(), key=str(i).encode())
            acked.append((time.perf_counter() - started) * 1000)
            while len(delivered) <= i:
                for batch in (await consumer.getmany(timeout_ms=1000)).values():
                    now = time.perf_counter()
                    delivered += [(now - float(r.value or b"0")) * 1000 for r in batch]
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    finally:
        await consumer.stop()
        await producer.stop()
    return {
        "publish_ack_ms": summary(acked),
        "publish_to_consume_ms": summary(delivered),
        "client_cpu_ms_per_record": round(cpu * 1000 / records, 3),
        "wall_s": round(wall, 2),
    }


async def _one(home: Path, records: int, connects: int) -> dict[str, Any]:
    admin, engine = _logins(home)
    prefix = f"bench{secrets.token_hex(4)}."
    await ensure_topics(admin, {"WEFT_TOPIC_PARTITIONS": "1"}, prefix=prefix)
    try:
        return {
            "protocol": engine.kafka_security_protocol,
            "principal": engine.kafka_username or None,
            "producer_start_ms": summary(await _connect_ms(engine, connects)),
            **await _traffic(engine, prefix, records),
        }
    finally:
        await delete_topics(admin, prefix)


async def run(
    plaintext: Path, sasl: Path, records: int, connects: int, rounds: int
) -> dict[str, Any]:
    """Alternate the brokers ``rounds`` times, so a load change on the shared machine hits
    both alike."""
    runs: dict[str, list[dict[str, Any]]] = {"plaintext": [], "sasl": []}
    for _ in range(rounds):
        runs["plaintext"].append(await _one(plaintext, records, connects))
        runs["sasl"].append(await _one(sasl, records, connects))
    return {"records_per_run": records, "machine": machine(), "runs": runs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--plaintext-home", type=Path, required=True)
    parser.add_argument("--sasl-home", type=Path, required=True)
    parser.add_argument("--records", type=int, default=500)
    parser.add_argument("--connects", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    result = asyncio.run(
        run(args.plaintext_home, args.sasl_home, args.records, args.connects, args.rounds)
    )
    save("kafka_sasl", result)


if __name__ == "__main__":
    main()
