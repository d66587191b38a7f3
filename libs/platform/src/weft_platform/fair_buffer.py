"""FairBuffer: records read ahead of their partition's order, served round-robin by tenant.

Kafka hands a consumer records in partition order; a flooding tenant's records would then
be run before a quiet tenant's that came after them. The buffer holds up to a bounded
number of records that were read but not yet handled, one queue per tenant, and serves the
tenants in turn. Reading ahead must not weaken at-least-once delivery, so each partition
keeps :class:`PartitionOffsets`: the offset committed for a partition is always the one
after its *unbroken run* of handled records, never past a record still queued or running.
A crash hands back at most the read-ahead window, which the id-based dedupe absorbs.

The buffer is pure state (no Kafka, no Redis) so its rules are unit-tested directly;
:class:`~weft_platform.fair_consumer.FairConsumer` drives it from a consumer.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from aiokafka.structs import TopicPartition


class PartitionOffsets:
    """The offsets read from one partition, in order, and which of them are handled."""

    def __init__(self) -> None:
        self._order: deque[int] = deque()
        self._handled: set[int] = set()
        self.last_read = -1

    def read(self, offset: int) -> None:
        """Note a record read (offsets only grow within one reading of a partition)."""
        if offset <= self.last_read:
            raise ValueError(f"offset {offset} read after {self.last_read}")
        self._order.append(offset)
        self.last_read = offset

    def handled(self, offset: int) -> int | None:
        """Mark ``offset`` handled; the new commit offset when the unbroken run of handled
        records from the oldest one read grew, else None (an older record is still out)."""
        self._handled.add(offset)
        commit = None
        while self._order and self._order[0] in self._handled:
            done = self._order.popleft()
            self._handled.discard(done)
            commit = done + 1
        return commit

    @property
    def outstanding(self) -> int:
        """Records read and not yet committed past: the partition's read-ahead."""
        return len(self._order)


@dataclass(eq=False, kw_only=True)
class Entry:
    """One record waiting in the buffer (or running)."""

    partition: TopicPartition
    offset: int
    tenant_id: str
    item: Any
    generation: int
    holder: str = field(default="")
    """The slot this entry holds while it runs (TenantSlots holder id)."""


@dataclass(frozen=True, kw_only=True)
class ReadAhead:
    """How far a consumer may read ahead of its partitions' commit points."""

    max_buffered: int = 256
    """Records read and not yet committed past, all partitions of the consumer together;
    at this many every partition is paused."""
    partition_buffer: int = 64
    """The same for one partition: at this many the partition is paused."""

    def __post_init__(self) -> None:
        if self.max_buffered < 1 or self.partition_buffer < 1:
            raise ValueError("read-ahead bounds must be at least 1")


Admit = Callable[[Entry], Awaitable[bool]]
"""Whether the entry's tenant may start one more piece of work now (takes its slot)."""


class FairBuffer:
    """Per-tenant queues served round-robin, with per-partition commit tracking."""

    def __init__(self, read_ahead: ReadAhead):
        self.read_ahead = read_ahead
        self._queues: OrderedDict[str, deque[Entry]] = OrderedDict()
        self._offsets: dict[TopicPartition, PartitionOffsets] = {}
        self._generation: dict[TopicPartition, int] = {}

    def add(self, partition: TopicPartition, offset: int, tenant_id: str, item: Any) -> Entry:
        """Buffer a record read from ``partition``. An offset at or before the last one read
        means the partition is read again from its commit point (a rebalance gave it back,
        or a seek): what was buffered for it is dropped, since it comes again."""
        offsets = self._offsets.get(partition)
        if offsets is not None and offset <= offsets.last_read:
            self.forget(partition)
            offsets = None
        if offsets is None:
            offsets = self._offsets[partition] = PartitionOffsets()
        offsets.read(offset)
        entry = Entry(
            partition=partition,
            offset=offset,
            tenant_id=tenant_id,
            item=item,
            generation=self._generation.get(partition, 0),
        )
        self._queues.setdefault(tenant_id, deque()).append(entry)
        return entry

    def skip(self, partition: TopicPartition, offset: int) -> int | None:
        """Note a record read and handled at once (a duplicate, a dead letter); the new
        commit offset, as :meth:`done`."""
        offsets = self._offsets.get(partition)
        if offsets is not None and offset <= offsets.last_read:
            self.forget(partition)
            offsets = None
        if offsets is None:
            offsets = self._offsets[partition] = PartitionOffsets()
        offsets.read(offset)
        return offsets.handled(offset)

    def forget(self, partition: TopicPartition) -> None:
        """Drop the partition's queued entries and offsets (it was revoked or rewound);
        entries of it still running no longer count when they end."""
        self._offsets.pop(partition, None)
        self._generation[partition] = self._generation.get(partition, 0) + 1
        for tenant_id in list(self._queues):
            kept = deque(e for e in self._queues[tenant_id] if e.partition != partition)
            if kept:
                self._queues[tenant_id] = kept
            else:
                del self._queues[tenant_id]

    async def take(self, admit: Admit) -> Entry | None:
        """The next entry in round-robin order of tenants whose ``admit`` allows it, or
        None when no waiting tenant may start anything now. A served tenant moves to the
        back of the order, so a tenant with one record waits behind at most one record of
        each other tenant, whatever their backlogs."""
        for tenant_id in list(self._queues):
            queue = self._queues[tenant_id]
            if not await admit(queue[0]):
                continue
            entry = queue.popleft()
            del self._queues[tenant_id]
            if queue:
                self._queues[tenant_id] = queue  # to the back of the order
            return entry
        return None

    def put_back(self, entry: Entry) -> None:
        """Queue an entry again at the head of its tenant's queue (it could not be
        handled durably: it must run again, and nothing after it is committed meanwhile)."""
        if entry.generation != self._generation.get(entry.partition, 0):
            return  # its partition was dropped: it is read again from Kafka
        queue = self._queues.get(entry.tenant_id)
        if queue is None:
            self._queues[entry.tenant_id] = deque([entry])
        else:
            queue.appendleft(entry)

    def done(self, entry: Entry) -> int | None:
        """Mark ``entry`` handled; its partition's new commit offset, if any."""
        if entry.generation != self._generation.get(entry.partition, 0):
            return None
        offsets = self._offsets.get(entry.partition)
        return None if offsets is None else offsets.handled(entry.offset)

    def waiting(self) -> int:
        """Entries queued (not running)."""
        return sum(len(q) for q in self._queues.values())

    def tenants(self) -> list[str]:
        """Tenants with queued entries, in the order they will be offered a runner."""
        return list(self._queues)

    def partitions(self) -> set[TopicPartition]:
        """Partitions with records read and not committed past, or queued."""
        queued = {e.partition for q in self._queues.values() for e in q}
        return queued | {p for p, o in self._offsets.items() if o.outstanding}

    def outstanding(self, partition: TopicPartition) -> int:
        """Records of ``partition`` read and not committed past."""
        offsets = self._offsets.get(partition)
        return 0 if offsets is None else offsets.outstanding

    def to_pause(self, assigned: Iterable[TopicPartition]) -> set[TopicPartition]:
        """The partitions that must not be fetched now: those at their own bound, or all
        of them while the consumer's whole read-ahead is at its bound."""
        assigned = set(assigned)
        total = sum(o.outstanding for o in self._offsets.values())
        if total >= self.read_ahead.max_buffered:
            return assigned
        limit = self.read_ahead.partition_buffer
        return {p for p in assigned if self.outstanding(p) >= limit}
