"""FairBuffer: records read ahead of their partition's order, served round-robin by tenant.

Kafka hands a consumer records in partition order; a flooding tenant's records would then
be run before a quiet tenant's that came after them. The buffer holds up to a bounded
number of records that were read but not yet handled, one queue per tenant, and serves the
tenants in turn. Reading ahead must not weaken at-least-once delivery, so each partition
keeps :class:`PartitionOffsets`: the offset committed for a partition is always the one
after its *unbroken run* of handled records, never past a record still queued or running.
A crash hands back at most the read-ahead window, which the id-based dedupe absorbs.

Two options serve a topic whose records of one key must not overlap (the sandbox's calls,
keyed by session, share a workspace):

- **One record of a key at a time.** An entry added with a ``key`` is not taken while an
  earlier entry of that key runs or waits ahead of it; its tenant's next entry of another
  key is offered instead, so other keys and tenants go on. A key's records therefore run
  one after another in offset order.
- **Parked records.** With :attr:`ReadAhead.partition_window` set, a partition is not
  paused when it holds ``partition_buffer`` queued records: the newest queued records of
  the tenant with the most of them are *parked* instead (their bodies dropped, their
  place, tenant, key and deadline kept) and read again from Kafka when they run. A tenant
  whose backlog of long calls fills a partition's read-ahead then costs memory for its
  offsets only, and the records of other tenants behind it are still read. The partition
  pauses when its records read and not committed past reach ``partition_window``.

The buffer is pure state (no Kafka, no Redis) so its rules are unit-tested directly;
:class:`~weft_platform.fair_consumer.FairConsumer` drives it from a consumer.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
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
    key: bytes | None = None
    """Entries of one key run one at a time, in offset order (None: no such rule)."""
    deadline: datetime | None = None
    """When the record's work is due at the latest (None: no deadline)."""
    read_at: float = 0.0
    """When the record was read (event loop time): what it has waited since."""

    @property
    def parked(self) -> bool:
        """The record's body was dropped: it is read again from Kafka before it runs."""
        return self.item is None


@dataclass(frozen=True, kw_only=True)
class ReadAhead:
    """How far a consumer may read ahead of its partitions' commit points."""

    max_buffered: int = 256
    """Records read and not yet committed past, all partitions of the consumer together;
    at this many every partition is paused."""
    partition_buffer: int = 64
    """The same for one partition: at this many the partition is paused."""
    partition_window: int = 0
    """0: as above. Above 0: ``max_buffered`` and ``partition_buffer`` bound the queued
    records whose bodies are held (the newest beyond them are parked, read again when
    they run), and a partition pauses only when its records read and not committed past
    reach this many."""

    def __post_init__(self) -> None:
        if self.max_buffered < 1 or self.partition_buffer < 1 or self.partition_window < 0:
            raise ValueError("read-ahead bounds must be at least 1")
        if 0 < self.partition_window < self.partition_buffer:
            raise ValueError("partition_window must be at least partition_buffer")

    @property
    def parks(self) -> bool:
        """Queued records beyond the bounds are parked rather than the partition paused."""
        return self.partition_window > 0


Admit = Callable[[Entry], Awaitable[bool]]
"""Whether the entry's tenant may start one more piece of work now (takes its slot)."""


class FairBuffer:
    """Per-tenant queues served round-robin, with per-partition commit tracking."""

    def __init__(self, read_ahead: ReadAhead):
        self.read_ahead = read_ahead
        self._queues: OrderedDict[str, deque[Entry]] = OrderedDict()
        self._offsets: dict[TopicPartition, PartitionOffsets] = {}
        self._generation: dict[TopicPartition, int] = {}
        self._busy_keys: dict[bytes, Entry] = {}
        """The key of each entry taken and not yet done or put back."""

    def add(
        self,
        partition: TopicPartition,
        offset: int,
        tenant_id: str,
        item: Any,
        *,
        key: bytes | None = None,
        deadline: datetime | None = None,
        read_at: float = 0.0,
    ) -> Entry:
        """Buffer a record read from ``partition``. An offset at or before the last one read
        means the partition is read again from its commit point (a rebalance gave it back,
        or a seek): what was buffered for it is dropped, since it comes again. ``key``: run
        after the earlier entries of that key (None: no order of its own)."""
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
            key=key,
            deadline=deadline,
            read_at=read_at,
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
        each other tenant, whatever their backlogs. A tenant is offered its oldest entry
        whose key is free (see :meth:`ready`)."""
        for tenant_id in list(self._queues):
            queue = self._queues[tenant_id]
            index = self._first_ready(queue)
            if index is None or not await admit(queue[index]):
                continue
            entry = queue[index]
            del queue[index]
            del self._queues[tenant_id]
            if queue:
                self._queues[tenant_id] = queue  # to the back of the order
            if entry.key is not None:
                self._busy_keys[entry.key] = entry
            return entry
        return None

    def _first_ready(self, queue: deque[Entry]) -> int | None:
        """The position of the queue's oldest entry whose key is neither running nor held
        by an older entry of the queue (a key's entries are in one partition, so in offset
        order here)."""
        ahead: set[bytes] = set()
        for index, entry in enumerate(queue):
            if entry.key is None:
                return index
            if entry.key not in self._busy_keys and entry.key not in ahead:
                return index
            ahead.add(entry.key)
        return None

    def ready(self, tenant_id: str) -> Entry | None:
        """The entry :meth:`take` would offer for ``tenant_id`` now (None: nothing)."""
        queue = self._queues.get(tenant_id)
        index = None if queue is None else self._first_ready(queue)
        return None if queue is None or index is None else queue[index]

    def put_back(self, entry: Entry) -> None:
        """Queue an entry again at the head of its tenant's queue (it could not be
        handled durably: it must run again, and nothing after it is committed meanwhile)."""
        self._free_key(entry)
        if entry.generation != self._generation.get(entry.partition, 0):
            return  # its partition was dropped: it is read again from Kafka
        queue = self._queues.get(entry.tenant_id)
        if queue is None:
            self._queues[entry.tenant_id] = deque([entry])
        else:
            queue.appendleft(entry)

    def release(self, entry: Entry) -> None:
        """The entry no longer runs, handled or not (a cancelled run): its key is free."""
        self._free_key(entry)

    def _free_key(self, entry: Entry) -> None:
        if entry.key is not None and self._busy_keys.get(entry.key) is entry:
            del self._busy_keys[entry.key]

    def done(self, entry: Entry) -> int | None:
        """Mark ``entry`` handled; its partition's new commit offset, if any."""
        self._free_key(entry)
        if entry.generation != self._generation.get(entry.partition, 0):
            return None
        offsets = self._offsets.get(entry.partition)
        return None if offsets is None else offsets.handled(entry.offset)

    def waiting(self) -> int:
        """Entries queued (not running)."""
        return sum(len(q) for q in self._queues.values())

    def parked_count(self) -> int:
        """Queued entries whose bodies were dropped."""
        return sum(1 for q in self._queues.values() for e in q if e.parked)

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
        of them while the consumer's whole read-ahead is at its bound. With parking, held
        bodies are bounded by :meth:`park`, and a partition pauses at its window only."""
        assigned = set(assigned)
        bounds = self.read_ahead
        if bounds.parks:  # the bodies are bounded by parking: the windows are what is left
            return {p for p in assigned if self.outstanding(p) >= bounds.partition_window}
        total = sum(o.outstanding for o in self._offsets.values())
        if total >= bounds.max_buffered:
            return assigned
        limit = bounds.partition_buffer
        return {p for p in assigned if self.outstanding(p) >= limit}

    def _held(self) -> dict[TopicPartition, int]:
        """Queued entries whose bodies are held, per partition."""
        held: dict[TopicPartition, int] = {}
        for queue in self._queues.values():
            for entry in queue:
                if not entry.parked:
                    held[entry.partition] = held.get(entry.partition, 0) + 1
        return held

    def park(self) -> int:
        """With parking on, drop the bodies of queued entries past the bounds (at most
        ``partition_buffer`` held per partition and ``max_buffered`` in all): each time
        the newest held entry of the tenant holding the most, so a flooding tenant's
        backlog goes first and a tenant with one record keeps it. The entries parked."""
        if not self.read_ahead.parks:
            return 0
        parked = 0
        held = self._held()
        for partition, count in held.items():
            while count > self.read_ahead.partition_buffer and self._park_one(partition):
                count -= 1
                parked += 1
        total = sum(self._held().values())
        while total > self.read_ahead.max_buffered and self._park_one(None):
            total -= 1
            parked += 1
        return parked

    def _park_one(self, partition: TopicPartition | None) -> bool:
        """Park the newest held entry (of ``partition``, or any) of the tenant holding the
        most such entries; False when none is held."""
        best: list[Entry] = []
        for queue in self._queues.values():
            mine = [e for e in queue if not e.parked and partition in (None, e.partition)]
            if len(mine) > len(best):
                best = mine
        if not best:
            return False
        best[-1].item = None
        return True
