"""The batch subscriber's poll, without a broker: ``consume_batch`` registers a
PromptBatchSubscriber, whose fetch neither sleeps after an empty ``getmany`` (the first
event after a quiet spell would reach the gateway's projector up to 100 ms late) nor
reorders a fetch. The latency itself is measured by ``bench/batch_idle_latency.py``. What a
batch handler receives (records in order, filters, dead letters) is the bus contract suite
in tests/integration/test_bus.py, run on the in-memory broker and on the real Kafka; the
poll tested here exists only with a real consumer, so it is pinned with a stand-in one."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from aiokafka.structs import TopicPartition
from faststream.kafka import KafkaBroker
from weft_contracts import Topic
from weft_platform.bus import EventBus, PromptBatchSubscriber
from weft_platform.settings import ServiceSettings


class _Consumer:
    """What ``get_msg`` asks of an aiokafka consumer: ``getmany``."""

    def __init__(self, fetched: dict[TopicPartition, list[str]]):
        self.fetched = fetched
        self.calls: list[dict[str, Any]] = []

    async def getmany(self, **kwargs: Any) -> dict[TopicPartition, list[str]]:
        self.calls.append(kwargs)
        return self.fetched


def _bus() -> EventBus:
    return EventBus(KafkaBroker("127.0.0.1:1"), ServiceSettings(topic_prefix="unit."))


async def _handler(_events: list[Any]) -> None:
    return None


def test_consume_batch_registers_a_prompt_batch_subscriber() -> None:
    bus = _bus()
    bus.consume_batch(Topic.AGENT_EVENTS, "projector", _handler, max_records=50, wait_ms=100)
    [subscriber] = bus.broker.subscribers
    assert type(subscriber) is PromptBatchSubscriber
    assert (subscriber.batch_timeout_ms, subscriber.max_records) == (100, 50)


@pytest.fixture
def no_sleep(monkeypatch: pytest.MonkeyPatch) -> None:
    async def refuse(*_args: Any) -> None:
        raise AssertionError("slept after an empty fetch")

    monkeypatch.setattr(anyio, "sleep", refuse)


@pytest.mark.usefixtures("no_sleep")
async def test_an_empty_fetch_returns_at_once_without_sleeping() -> None:
    bus = _bus()
    bus.consume_batch(Topic.AGENT_EVENTS, "projector", _handler, max_records=50, wait_ms=100)
    [subscriber] = bus.broker.subscribers
    assert isinstance(subscriber, PromptBatchSubscriber)
    consumer = _Consumer({})
    assert await subscriber.get_msg(consumer) == ()
    assert consumer.calls == [{"timeout_ms": 100, "max_records": 50}]  # getmany waits


@pytest.mark.usefixtures("no_sleep")
async def test_a_fetch_is_one_batch_in_partition_order() -> None:
    bus = _bus()
    bus.consume_batch(Topic.AGENT_EVENTS, "projector", _handler)
    [subscriber] = bus.broker.subscribers
    assert isinstance(subscriber, PromptBatchSubscriber)
    fetched = {TopicPartition("t", 0): ["a", "b"], TopicPartition("t", 1): ["c"]}
    assert await subscriber.get_msg(_Consumer(fetched)) == ("a", "b", "c")
