"""FairConsumer: a consumer group member that runs records fairly across tenants.

:meth:`EventBus.consume` runs one record at a time in partition order, so a tenant that
floods a topic delays every tenant behind it. A FairConsumer instead reads records into a
:class:`~weft_platform.fair_buffer.FairBuffer` (bounded read-ahead), and ``concurrency``
runner tasks take them round-robin by tenant, each run holding one of the tenant's
:class:`~weft_platform.tenant_slots.TenantSlots` (a per-tenant cap across replicas).

A cap across replicas alone does not keep a runner free on every replica: with two
replicas of two runners and a cap of two, a flooding tenant can take both runners of one
replica, and a quiet tenant's call read by that replica waits for the flood's calls to end.
So one tenant also holds at most ``tenant_max_local`` of this consumer's runners (by
default all but one): every replica keeps a runner that a flooding tenant cannot take.

At-least-once holds as in :meth:`EventBus.consume` (same decoding, credential check,
dedupe, retries and dead letters):

- the offset committed per partition is the one after the unbroken run of handled
  records (:class:`~weft_platform.fair_buffer.PartitionOffsets`), so a record still queued
  or running is never committed past, however many later records are done;
- a partition is paused (``AIOKafkaConsumer.pause``) when its read-ahead reaches
  ``partition_buffer`` records, and every partition when the consumer's reaches
  ``max_buffered``; they are resumed as records are handled. The poll loop itself never
  blocks, so the consumer keeps its group membership while paused;
- a record that could be neither handled nor dead-lettered is queued again (after a
  growing pause), not skipped;
- a revoked partition's queued records are dropped (its new owner reads them from the
  commit point); a partition read again from an older offset starts over.

Options for a topic like ``sandbox.calls`` (docs/fairness.md, "Sandbox calls"):

- ``serialize_keys``: records of one Kafka key (the session) run one at a time, in offset
  order (:class:`~weft_platform.fair_buffer.FairBuffer`); other keys and tenants go on.
- ``ReadAhead.partition_window``: a tenant's backlog past the read-ahead is parked, not
  a reason to pause the partition; a parked record is read again (:class:`RecordFetcher`)
  when it runs.
- ``deadline_of`` and ``overdue``: a record still waiting when its deadline passes (its
  tenant at its cap, or its key busy) is handed to ``overdue`` with how long it waited,
  without a slot, so that it ends in an answer at its deadline and is committed.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Collection
from datetime import UTC, datetime
from typing import Any

import structlog
from aiokafka import AIOKafkaConsumer
from aiokafka.structs import TopicPartition
from faststream import AckPolicy
from pydantic import TypeAdapter, ValidationError
from weft_contracts import Topic, UnsupportedSchemaVersion
from weft_contracts.compat import read_json
from weft_contracts.topics import TOPIC_MODELS

from weft_platform.bus import (
    REFUSED,
    EventBus,
    Handler,
    _Commits,
    _delivery,
    _prompt,
    _Redelivery,
    _refusal,
    _wanted,
)
from weft_platform.fair_buffer import Entry, FairBuffer, ReadAhead
from weft_platform.record_fetch import Fetch, RecordFetcher
from weft_platform.tasks import cancel_and_wait
from weft_platform.tenant_slots import TenantSlots

log = structlog.get_logger(__name__)

IDLE_POLL_S = 0.2
"""How often runners look again when every waiting tenant is at its cap: another
replica's slot coming free wakes nobody here (and a waiting record's deadline passes)."""

Overdue = Callable[[Any, float], Awaitable[None]]
"""Answers a decoded record whose deadline passed while it waited (seconds waited)."""


class _Wakeup:
    """Wakes runners that wait for work: one future per waiting runner, resolved by
    :meth:`set` or by its own timer (a wait with a timeout and no extra task)."""

    def __init__(self) -> None:
        self._waiters: set[asyncio.Future[None]] = set()
        self._set = False

    def arm(self) -> None:
        """Forget earlier wake-ups: only one from now on ends the next wait early."""
        self._set = False

    def set(self) -> None:
        """Wake every waiter (and the next wait, if none waits now)."""
        self._set = True
        for waiter in self._waiters:
            _wake(waiter)

    async def wait_for(self, timeout_s: float) -> None:
        """Return at the next wake-up since :meth:`arm`, or after ``timeout_s``."""
        if self._set:
            return
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()
        self._waiters.add(waiter)
        timer = loop.call_later(timeout_s, _wake, waiter)
        try:
            await waiter
        finally:
            timer.cancel()
            self._waiters.discard(waiter)


def _local_cap(concurrency: int, tenant_max_local: int | None) -> int:
    """Runners of one consumer a single tenant may hold: ``tenant_max_local`` when given
    (0 or above ``concurrency`` means no limit of its own), else all but one."""
    if tenant_max_local is None:
        return max(1, concurrency - 1)
    if tenant_max_local <= 0 or tenant_max_local > concurrency:
        return concurrency
    return tenant_max_local


def _wake(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class FairConsumer:
    """Reads ``topic`` in group ``group_id``; runs ``handler`` fairly across tenants."""

    def __init__(
        self,
        bus: EventBus,
        topic: Topic,
        group_id: str,
        handler: Handler,
        *,
        slots: TenantSlots,
        concurrency: int,
        read_ahead: ReadAhead,
        holder_prefix: str,
        tenant_max_local: int | None = None,
        types: Collection[str] | None = None,
        serialize_keys: bool = False,
        deadline_of: Callable[[Any], datetime | None] | None = None,
        overdue: Overdue | None = None,
        fetch: Fetch | None = None,
    ):
        """``serialize_keys``, ``deadline_of`` with ``overdue``, and ``fetch`` (how a
        parked record is read again; default: a :class:`RecordFetcher` on the bus's
        broker) are the options of the module docstring."""
        if (deadline_of is None) != (overdue is None):
            raise ValueError("deadline_of and overdue go together")
        self._bus = bus
        self._topic = topic
        self._group = group_id
        self._handler = handler
        self._slots = slots
        self._concurrency = concurrency
        self._local_cap = _local_cap(concurrency, tenant_max_local)
        self.buffer = FairBuffer(read_ahead)
        self._prefix = holder_prefix
        self._serialize_keys = serialize_keys
        self._deadline_of = deadline_of
        self._overdue = overdue
        self._fetcher: RecordFetcher | None = None
        if fetch is None and read_ahead.parks:
            self._fetcher = RecordFetcher(bus._settings)
            fetch = self._fetcher.fetch
        self._fetch = fetch
        self._wanted = None if types is None else frozenset(types)
        self._adapter: TypeAdapter[Any] = TypeAdapter(TOPIC_MODELS[topic])
        self._commits = _Commits(group_id, bus._settings.commit_interval_ms / 1000)
        self._pauses = _Redelivery(bus._settings)
        self._consumer: Any = None
        self._paused: set[TopicPartition] = set()
        self._running: dict[str, Entry] = {}
        self._changed = _Wakeup()
        """Set when records arrive or a run ends: waiting runners look again."""
        self._choosing = asyncio.Lock()
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = False
        bus._commits.append(self._commits)  # flushed with the bus's at shutdown

    def register(self, *, fetch_records: int = 100) -> None:
        """Subscribe on the bus's broker (before the broker starts)."""
        settings = self._bus._settings
        subscriber = self._bus.broker.subscriber(
            self._bus.topic_name(self._topic),
            batch=True,
            max_records=min(fetch_records, self.buffer.read_ahead.max_buffered),
            batch_timeout_ms=100,
            group_id=settings.topic_prefix + self._group,
            ack_policy=AckPolicy.MANUAL,  # commits follow the unbroken handled runs
            auto_offset_reset="earliest",
            decoder=_delivery,
        )
        _prompt(subscriber)
        subscriber(self._on_batch)

    async def start(self) -> None:
        """Start the runners and the slot lease renewal."""
        self._tasks = [
            asyncio.create_task(self._runner(), name=f"fair:{self._group}:{i}")
            for i in range(self._concurrency)
        ]
        self._tasks.append(asyncio.create_task(self._renewal(), name=f"fair:{self._group}:lease"))

    async def stop(self, grace_s: float = 5.0) -> None:
        """Take no more records; let running calls finish for ``grace_s``, then cancel
        them. Records not handled are read again by their partitions' next owner (nothing
        past them was committed). Slots still held are given back."""
        self._stopping = True
        self._changed.set()
        runners, others = self._tasks[: self._concurrency], self._tasks[self._concurrency :]
        if runners:
            _, late = await asyncio.wait(runners, timeout=grace_s)
            await cancel_and_wait(late)
        await cancel_and_wait(others)
        for entry in list(self._running.values()):
            await self._release(entry)
        self._running.clear()
        if self._fetcher is not None:
            await self._fetcher.stop()

    def state(self) -> dict[str, Any]:
        """What the consumer holds now (operators' view)."""
        return {
            "waiting": self.buffer.waiting(),
            "running": len(self._running),
            "tenants_waiting": len(self.buffer.tenants()),
            "parked": self.buffer.parked_count(),
            "paused_partitions": sorted(p.partition for p in self._paused),
        }

    # -- reading --------------------------------------------------------------------------

    async def _on_batch(self, delivery: Any) -> None:
        """Buffer one fetch. Never waits on the runners: a full buffer pauses partitions."""
        consumer = delivery.consumer
        if isinstance(consumer, AIOKafkaConsumer):
            self._consumer = consumer
        rewound: set[TopicPartition] = set()
        if delivery.record:  # lag is known from the first fetch, before a commit point is
            self._commits.arrived(consumer, delivery.record[0], first_only=True)
        for record, body in zip(delivery.record, delivery.body, strict=True):
            partition = TopicPartition(record.topic, record.partition)
            if partition in rewound:
                continue  # read again after the record handed back
            try:
                decoded = await self._admit(record, body)
            except Exception as exc:  # Redis or the DLQ unreachable: read it again
                # Seeking to this record keeps the ones before it buffered: the partition
                # goes on from here, and nothing before it is lost or read twice.
                rewound.add(partition)
                await self._pauses.hand_back(self._group, consumer, (record,), exc)
                continue
            if decoded is None:
                await self._commit(partition, self.buffer.skip(partition, record.offset))
            else:
                item = (decoded, record, body)
                self.buffer.add(
                    partition, record.offset, decoded.tenant_id, item,
                    key=record.key if self._serialize_keys else None,
                    deadline=None if self._deadline_of is None else self._deadline_of(decoded),
                    read_at=asyncio.get_running_loop().time(),
                )  # fmt: skip
        if parked := self.buffer.park():
            log.info("records_parked", group=self._group, parked=parked)
        self._sync_pauses()
        self._changed.set()

    async def _admit(self, record: Any, body: bytes) -> Any | None:
        """The decoded record to run, or None when it is handled already: filtered out,
        dead-lettered (unreadable or refused credential) or a duplicate."""
        bus = self._bus
        if not _wanted(self._wanted, record):
            return None
        try:
            decoded = read_json(self._adapter, body)
        except (ValidationError, UnsupportedSchemaVersion) as exc:
            await bus._dead_letter(self._topic, self._group, record, body, exc, _refusal(exc))
            return None
        refused = bus._refused(self._topic, decoded)
        if refused is not None:
            await bus._dead_letter(self._topic, self._group, record, body, refused, REFUSED)
            return None
        if await bus._seen(self._group, decoded.id):
            log.info("duplicate_skipped", topic=self._topic.value, id=decoded.id)
            return None
        return decoded

    def _sync_pauses(self) -> None:
        """Pause the partitions at their read-ahead bound, resume the others."""
        consumer = self._consumer
        if consumer is None:
            return
        assigned = set(consumer.assignment())
        paused = set(consumer.paused())  # the consumer's own view: a new assignment is not
        wanted = self.buffer.to_pause(assigned)
        if pause := wanted - paused:
            consumer.pause(*pause)
            log.info("partitions_paused", partitions=sorted(p.partition for p in pause))
        if resume := (paused & assigned) - wanted:
            consumer.resume(*resume)
        self._paused = wanted

    # -- running --------------------------------------------------------------------------

    async def _runner(self) -> None:
        # Runners end by seeing ``_stopping`` rather than by a cancel: a cancel that lands
        # inside a Redis call can be lost (seen with fakeredis), leaving the task looping.
        while (entry := await self._next()) is not None:
            try:
                await self._run(entry)
            finally:
                self._running.pop(entry.holder, None)
                await self._release(entry)
                self._changed.set()

    async def _next(self) -> Entry | None:
        while not self._stopping:
            self._changed.arm()  # a change from here on wakes the wait below
            async with self._choosing:  # one runner takes at a time: round-robin holds
                self._drop_revoked()
                try:
                    entry = await self.buffer.take(self._try_slot)
                except Exception:  # Redis unreachable: wait, the records stay buffered
                    log.exception("tenant_slot_failed", group=self._group)
                    entry = None
                if entry is not None:
                    self._running[entry.holder] = entry
                    return entry
            await self._changed.wait_for(IDLE_POLL_S)
        return None

    async def _try_slot(self, entry: Entry) -> bool:
        if self._is_overdue(entry):
            # Answered, not run: it takes a runner for a moment but no slot of its tenant.
            entry.holder = f"{self._prefix}:overdue:{uuid.uuid4().hex[:8]}"
            return True
        here = sum(1 for e in self._running.values() if e.tenant_id == entry.tenant_id)
        if here >= self._local_cap:
            return False  # the replica's last runners stay free for other tenants
        holder = f"{self._prefix}:{entry.partition.partition}:{entry.offset}:{uuid.uuid4().hex[:8]}"
        if not await self._slots.acquire(entry.tenant_id, holder):
            return False
        entry.holder = holder
        return True

    def _is_overdue(self, entry: Entry) -> bool:
        return entry.deadline is not None and entry.deadline <= datetime.now(UTC)

    def _drop_revoked(self) -> None:
        consumer = self._consumer
        if consumer is None:
            return
        assigned = set(consumer.assignment())
        for partition in self.buffer.partitions() - assigned:
            log.info("revoked_partition_dropped", partition=partition.partition)
            self.buffer.forget(partition)  # its calls still running no longer commit

    async def _run(self, entry: Entry) -> None:
        bus = self._bus
        try:
            if entry.parked and not await self._unpark(entry):
                await self._commit(entry.partition, self.buffer.done(entry))
                return
            decoded, record, body = entry.item
            handler = self._handler_for(entry)
            await bus._handle(self._topic, self._group, record, body, decoded, handler)
            await bus._mark(self._group, decoded.id)
        except asyncio.CancelledError:
            raise  # shutdown: not committed, read again by the partition's next owner
        except Exception as exc:  # neither handled nor dead-lettered: run it again later
            log.error("record_requeued", group=self._group, offset=entry.offset, error=repr(exc))
            await asyncio.sleep(self._pauses.next_pause())
            self.buffer.put_back(entry)
            return
        self._pauses.reset()
        await self._commit(entry.partition, self.buffer.done(entry))
        self._sync_pauses()

    def _handler_for(self, entry: Entry) -> Handler:
        """The handler, or ``overdue`` for an entry taken past its deadline."""
        overdue = self._overdue
        if overdue is None or not entry.holder.startswith(f"{self._prefix}:overdue:"):
            return self._handler
        waited = asyncio.get_running_loop().time() - entry.read_at

        async def answer(call: Any) -> None:
            await overdue(call, waited)

        return answer

    async def _unpark(self, entry: Entry) -> bool:
        """Read a parked record again; False when it turns out handled already (another
        replica ran it, or it is gone from the log: nothing is left to run)."""
        assert self._fetch is not None, "records are parked only with a fetch"
        fetched = await self._fetch(entry.partition, entry.offset)
        if fetched is None:
            log.error("parked_record_gone", group=self._group, offset=entry.offset)
            return False
        record, body = fetched
        decoded = await self._admit(record, body)
        if decoded is None:
            return False
        entry.item = (decoded, record, body)
        return True

    async def _commit(self, partition: TopicPartition, offset: int | None) -> None:
        if offset is not None and self._consumer is not None:
            await self._commits.advanced(self._consumer, {partition: offset})

    async def _release(self, entry: Entry) -> None:
        try:
            await self._slots.release(entry.tenant_id, entry.holder)
        except Exception:  # the slot expires with its lease
            log.warning("slot_release_failed", tenant_id=entry.tenant_id)

    async def _renewal(self) -> None:
        interval = max(0.5, self._slots.lease_s / 3)
        while True:
            await asyncio.sleep(interval)
            try:
                held = [(e.tenant_id, e.holder) for e in list(self._running.values())]
                await self._slots.renew(held)
            except Exception:  # a Redis hiccup must not stop the renewals for good
                log.exception("slot_renewal_failed", group=self._group)
