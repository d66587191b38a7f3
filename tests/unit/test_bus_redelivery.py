"""What a group consumer does with a record it could not durably handle (its handler and
its dead letter both failed), without a broker: the partition is sought back to the
record, the next read waits a pause that doubles up to a cap. That this keeps a later
record's commit from passing the failed one is shown on the real broker
(tests/integration/test_bus.py, tests/integration/test_bus_broker_outage.py)."""

from __future__ import annotations

from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka.structs import TopicPartition
from weft_platform.bus import _Redelivery
from weft_platform.settings import ServiceSettings


class _Consumer(AIOKafkaConsumer):  # type: ignore[misc]  # aiokafka ships no types
    """An aiokafka consumer that only records its seeks."""

    def __init__(self) -> None:
        self.seeks: list[tuple[TopicPartition, int]] = []

    def seek(self, partition: TopicPartition, offset: int) -> None:
        self.seeks.append((partition, offset))


class _Record:
    def __init__(self, partition: int, offset: int):
        self.topic, self.partition, self.offset = "t", partition, offset


def _redelivery() -> _Redelivery:
    return _Redelivery(
        ServiceSettings(consumer_retry_backoff_s=0.001, redelivery_backoff_max_s=0.004)
    )


async def test_a_failed_record_is_sought_back_never_passed() -> None:
    consumer = _Consumer()
    records: list[Any] = [_Record(0, 5), _Record(0, 6), _Record(1, 9)]
    await _redelivery().hand_back("g", consumer, records, RuntimeError("dlq down"))
    assert sorted(consumer.seeks) == [(TopicPartition("t", 0), 5), (TopicPartition("t", 1), 9)]


def test_the_pause_doubles_up_to_its_cap_and_starts_over_after_a_success() -> None:
    pauses = _redelivery()
    assert [pauses.next_pause() for _ in range(5)] == [0.001, 0.002, 0.004, 0.004, 0.004]
    for _ in range(100):  # a long outage: the pause stays at the cap
        assert pauses.next_pause() == 0.004
    pauses.reset()
    assert pauses.next_pause() == 0.001


async def test_without_a_real_consumer_the_failure_is_raised() -> None:
    """FastStream's in-memory test broker has no offsets to seek: the failure surfaces."""
    with pytest.raises(RuntimeError, match="dlq down"):
        await _redelivery().hand_back("g", object(), [_Record(0, 1)], RuntimeError("dlq down"))
