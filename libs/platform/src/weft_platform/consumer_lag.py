"""Consumer lag from each consumer's own view, computed when Prometheus scrapes.

Lag of a partition = the highwater the consumer's last fetch reported minus the offset
after the last record this process handled (or the offset of the record it is handling
now). Both are already in memory: no admin call, no broker round trip per scrape. A
partition this process has not fetched from yet (no highwater) or has not read a record
of since it got the partition is left out rather than guessed.

A consumer group's handling code notes positions with :meth:`GroupLag.at` (one dict
store per record); the collector reads them from the scrape thread. The dicts are only
ever assigned to from the event loop; reading a stale value is fine for a gauge.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from typing import Any

from aiokafka.structs import TopicPartition
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry


class GroupLag:
    """Positions of one consumer group's consumer in this process."""

    __slots__ = ("__weakref__", "_consumer", "group", "positions")

    def __init__(self, group: str):
        self.group = group
        """The group's name without the deployment's topic prefix (bounded label)."""
        self.positions: dict[TopicPartition, int] = {}
        self._consumer: Any = None

    def at(
        self, consumer: Any, topic: str, partition: int, offset: int, first_only: bool = False
    ) -> None:
        """The consumer's next record to handle on ``topic``/``partition`` is ``offset``
        (``first_only``: unless a position of the partition is known already)."""
        self._consumer = consumer
        tp = TopicPartition(topic, partition)
        if first_only and tp in self.positions:
            return
        self.positions[tp] = offset

    def sample(self) -> Iterator[tuple[str, int, int]]:
        """(topic, partition, lag) of every assigned partition whose lag is known."""
        consumer = self._consumer
        if consumer is None:
            return
        try:
            assigned = list(consumer.assignment())
        except RuntimeError:  # the assignment changed while we copied it: next scrape
            return
        for tp in assigned:
            position = self.positions.get(tp)
            try:
                highwater = consumer.highwater(tp)
            except AssertionError:  # revoked since the copy
                continue
            if position is None or highwater is None:
                continue
            yield tp.topic, tp.partition, max(0, highwater - position)


class ConsumerLagCollector(Collector):
    """The ``weft_kafka_consumer_lag`` gauge over every :class:`GroupLag` still alive."""

    def __init__(self, name: str, *, registry: CollectorRegistry | None = None):
        self._name = name
        self._groups: weakref.WeakSet[GroupLag] = weakref.WeakSet()
        self._strip = ""
        if registry is not None:
            registry.register(self)

    def strip_prefix(self, prefix: str) -> None:
        """Report topics without the deployment's ``topic_prefix`` (bounded, stable
        names across test stacks and environments)."""
        self._strip = prefix

    def group(self, group: str) -> GroupLag:
        """A tracker for one consumer of ``group`` (unprefixed name)."""
        tracker = GroupLag(group)
        self._groups.add(tracker)
        return tracker

    def _family(self) -> GaugeMetricFamily:
        return GaugeMetricFamily(
            self._name,
            "Records of a partition not yet handled by this process's consumer of a "
            "group: its last fetched highwater minus its position.",
            labels=["group", "topic", "partition"],
        )

    def describe(self) -> Iterator[GaugeMetricFamily]:
        yield self._family()

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = self._family()
        for tracker in list(self._groups):
            for topic, partition, lag in tracker.sample():
                name = topic.removeprefix(self._strip) if self._strip else topic
                family.add_metric([tracker.group, name, str(partition)], lag)
        yield family
