"""The bus across a real broker outage, on a PRIVATE broker this test starts and stops
(its own WEFT_HOME under tmp and free ports: the shared broker is never touched).

While the broker is away, a publisher keeps publishing (each publish waits for its ack,
within ``publish_window_s``) and a group consumer is in the middle of a record whose
handler fails and whose dead letter cannot be written. After the restart: every record
published is handled, in publish order, the failed record is dead-lettered, none is
skipped (invariant 3)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from weft_contracts import ThoughtData, ThoughtEvent, Topic

from tests.integration.kafka_helpers import dead_letters, own_topics, service_runtime
from tests.private_broker import PrivateBroker


def _event(delta: str) -> ThoughtEvent:
    return ThoughtEvent(tenant_id="t", session_id="s", request_id="r",
                        data=ThoughtData(round=0, delta=delta))  # fmt: skip


async def _until(condition: Callable[[], bool]) -> None:
    """Wait up to 120 s for ``condition`` (the caller asserts what it needs after)."""
    for _ in range(1200):
        if condition():
            return
        await asyncio.sleep(0.1)


class RefusedLetters:
    """Counts the consumer's dead letters that could not be written."""

    def __init__(self, bus: Any):
        self.count = 0
        self._publish = bus.publish
        bus.publish = self._publish_counted

    async def _publish_counted(self, topic: Topic, message: Any) -> None:
        try:
            await self._publish(topic, message)
        except Exception:
            if topic is Topic.DLQ:
                self.count += 1
            raise


async def test_a_broker_outage_loses_no_record_and_skips_none(
    private_broker: PrivateBroker, infra: dict[str, str]
) -> None:
    private = {**infra, **private_broker.client_env}
    retries: dict[str, Any] = {"consumer_attempts": 2, "consumer_retry_backoff_s": 0.05}
    away = asyncio.Event()
    handled: list[str] = []

    async def handler(event: Any) -> None:
        delta = event.data.delta
        if delta == "poison":
            await away.wait()  # fails while the broker is away: its dead letter must wait
            raise RuntimeError("cannot process poison")
        handled.append(delta)

    async with (
        own_topics(private, partitions=1) as prefix,
        # The consumer's publishes give up after 2 s: its dead letter fails in the outage.
        service_runtime(
            private, "outage-consumer", prefix=prefix, publish_window_s=2,
            redelivery_backoff_max_s=1, **retries,
        ) as consumer,
        service_runtime(private, "outage-publisher", prefix=prefix, start=True) as publisher,
    ):  # fmt: skip
        consumer.bus.consume(Topic.AGENT_EVENTS, "outage", handler)
        refused = RefusedLetters(consumer.bus)
        await consumer.broker.start()
        sent = ["before-0", "poison", "before-1"]
        for delta in sent:
            await publisher.bus.publish(Topic.AGENT_EVENTS, _event(delta))
        await _until(lambda: "before-0" in handled)

        await private_broker.down()
        away.set()
        during = [f"during-{i}" for i in range(5)]
        publishing = asyncio.gather(
            *(publisher.bus.publish(Topic.AGENT_EVENTS, _event(d)) for d in during)
        )
        await _until(lambda: refused.count >= 1)  # the dead letter's 2 s window ran out
        assert refused.count >= 1
        assert not publishing.done(), "a publish gave up inside its window"
        await private_broker.up()
        await publishing  # every publish of the outage was acknowledged
        sent += during
        await publisher.bus.publish(Topic.AGENT_EVENTS, _event("after"))
        sent.append("after")

        expected = [d for d in sent if d != "poison"]
        await _until(lambda: set(expected) <= set(handled))
        firsts = list(dict.fromkeys(handled))
        assert firsts == expected, "a record was skipped or overtaken"
        [letter] = await dead_letters(consumer, 1)
        assert letter["data"]["reason"] == "handler_failed: cannot process poison"
