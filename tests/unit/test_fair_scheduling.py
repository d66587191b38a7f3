"""Fair scheduling of consumed records across tenants (invariant 5) without weakening
at-least-once delivery (invariant 3): the commit offset follows only the unbroken run of
handled records, the read-ahead is bounded by pausing partitions, tenants are served
round-robin, and a killed replica's tenant slots come back when their leases run out.

The FairConsumer tests drive the consumer's own fetch handler with a stand-in aiokafka
consumer (what it asks of one: assignment, pause, resume, commit) and fakeredis (with its
Lua) for dedupe and tenant slots; the real broker is exercised by
tests/security/test_fair_shares.py."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka.structs import TopicPartition
from fakeredis import FakeAsyncRedis
from faststream.kafka import KafkaBroker
from weft_contracts import ToolCallRequested, ToolCallRequestedData, ToolContext, Topic
from weft_platform.bus import EventBus
from weft_platform.fair_buffer import Entry, FairBuffer, PartitionOffsets, ReadAhead
from weft_platform.fair_consumer import FairConsumer
from weft_platform.settings import ServiceSettings
from weft_platform.tenant_slots import TenantSlots

TOPIC = "unit.weft.tool.calls.v1"
P0 = TopicPartition(TOPIC, 0)
P1 = TopicPartition(TOPIC, 1)


async def _poll(condition: Callable[[], bool], what: str, timeout_s: float = 10.0) -> None:
    """Wait until ``condition`` holds (the runners work in their own tasks)."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    for _ in range(int(timeout_s * 100)):
        if condition() or asyncio.get_running_loop().time() > deadline:
            break
        await asyncio.sleep(0.01)
    assert condition(), what


async def _admit_all(_entry: Entry) -> bool:
    return True


# -- PartitionOffsets and FairBuffer (pure state) ---------------------------------------


def test_offsets_handled_out_of_order_commit_only_the_unbroken_prefix() -> None:
    offsets = PartitionOffsets()
    for offset in (10, 11, 12, 13):
        offsets.read(offset)
    assert offsets.handled(12) is None  # 10 and 11 still out
    assert offsets.handled(13) is None
    assert offsets.handled(10) == 11  # only 10 is an unbroken run
    assert offsets.outstanding == 3
    assert offsets.handled(11) == 14  # 11 closes the gap: 12 and 13 follow
    assert offsets.outstanding == 0


def test_offsets_with_gaps_in_the_log_commit_past_the_last_handled() -> None:
    offsets = PartitionOffsets()
    for offset in (3, 7, 9):  # compacted or filtered records leave gaps
        offsets.read(offset)
    assert offsets.handled(7) is None
    assert offsets.handled(3) == 8
    assert offsets.handled(9) == 10


async def test_tenants_are_served_round_robin_whatever_their_backlog() -> None:
    buffer = FairBuffer(ReadAhead())
    for offset in range(5):
        buffer.add(P0, offset, "flooder", offset)
    buffer.add(P0, 5, "quiet", 5)
    buffer.add(P1, 0, "other", 100)
    order = []
    while (entry := await buffer.take(_admit_all)) is not None:
        order.append(entry.tenant_id)
    assert order == ["flooder", "quiet", "other", "flooder", "flooder", "flooder", "flooder"]


async def test_a_tenant_that_may_not_start_is_passed_over_not_dropped() -> None:
    buffer = FairBuffer(ReadAhead())
    buffer.add(P0, 0, "capped", "a")
    buffer.add(P0, 1, "free", "b")

    async def only_free(entry: Entry) -> bool:
        return entry.tenant_id == "free"

    entry = await buffer.take(only_free)
    assert entry is not None and entry.item == "b"
    assert await buffer.take(only_free) is None
    assert buffer.tenants() == ["capped"]
    # Handling the later record first commits nothing: the capped tenant's record is out.
    assert buffer.done(entry) is None


def test_read_ahead_pauses_a_full_partition_then_every_partition() -> None:
    buffer = FairBuffer(ReadAhead(max_buffered=5, partition_buffer=3))
    for offset in range(3):
        buffer.add(P0, offset, "t", offset)
    assert buffer.to_pause({P0, P1}) == {P0}
    buffer.add(P1, 0, "t", 0)
    buffer.add(P1, 1, "t", 1)
    assert buffer.to_pause({P0, P1}) == {P0, P1}  # five read ahead in all


async def test_done_drains_the_read_ahead_so_the_partition_resumes() -> None:
    buffer = FairBuffer(ReadAhead(max_buffered=100, partition_buffer=2))
    buffer.add(P0, 0, "t", 0)
    buffer.add(P0, 1, "t", 1)
    assert buffer.to_pause({P0}) == {P0}
    first = await buffer.take(_admit_all)
    assert first is not None
    assert buffer.done(first) == 1
    assert buffer.to_pause({P0}) == set()


async def test_a_partition_read_again_from_its_commit_point_starts_over() -> None:
    buffer = FairBuffer(ReadAhead())
    buffer.add(P0, 0, "t", "old0")
    buffer.add(P0, 1, "t", "old1")
    running = await buffer.take(_admit_all)
    assert running is not None
    buffer.add(P0, 0, "t", "new0")  # a rebalance handed the partition back from offset 0
    assert [e.item for e in [await buffer.take(_admit_all)] if e] == ["new0"]
    assert buffer.done(running) is None  # the old reading's record no longer commits


# -- TenantSlots (fakeredis with Lua) ----------------------------------------------------


async def test_tenant_slots_cap_a_tenant_and_not_the_others() -> None:
    slots = TenantSlots(FakeAsyncRedis(), "unit", cap=2, lease_s=30)
    assert await slots.acquire("b", "r1:1")
    assert await slots.acquire("b", "r2:1")
    assert not await slots.acquire("b", "r1:2")
    assert await slots.acquire("c", "r1:3")
    await slots.release("b", "r1:1")
    assert await slots.acquire("b", "r1:2")


async def test_a_killed_replicas_slots_expire_while_renewed_ones_stay() -> None:
    slots = TenantSlots(FakeAsyncRedis(), "unit", cap=2, lease_s=1.5)
    assert await slots.acquire("b", "killed:1")
    assert await slots.acquire("b", "alive:1")
    renewing = True

    async def renew() -> None:
        while renewing:
            await slots.renew([("b", "alive:1")])
            await asyncio.sleep(0.3)

    task = asyncio.create_task(renew())
    try:
        # The killed replica never releases nor renews: its slot comes back by itself.
        deadline = asyncio.get_running_loop().time() + 10
        while not await slots.acquire("b", "alive:2"):
            assert asyncio.get_running_loop().time() < deadline, "the slot never expired"
            await asyncio.sleep(0.1)
        assert not await slots.acquire("b", "alive:3")  # the renewed slot is still held
    finally:
        renewing = False
        await task


# -- FairConsumer with a stand-in aiokafka consumer --------------------------------------


class _Consumer(AIOKafkaConsumer):  # type: ignore[misc]
    """What FairConsumer asks of an aiokafka consumer, without a broker."""

    def __init__(self, partitions: set[TopicPartition]):  # no broker: no super().__init__
        self.assigned = set(partitions)
        self.paused_now: set[TopicPartition] = set()
        self.commits: list[dict[TopicPartition, int]] = []

    def assignment(self) -> set[TopicPartition]:
        return set(self.assigned)

    def pause(self, *partitions: TopicPartition) -> None:
        self.paused_now |= set(partitions)

    def resume(self, *partitions: TopicPartition) -> None:
        self.paused_now -= set(partitions)

    def paused(self) -> set[TopicPartition]:
        return self.paused_now & self.assigned

    async def commit(self, offsets: Any = None) -> None:
        self.commits.append(dict(offsets))

    def committed_offset(self, partition: TopicPartition) -> int:
        return max((c[partition] for c in self.commits if partition in c), default=-1)


@dataclass
class _Record:
    topic: str
    partition: int
    offset: int
    key: bytes | None = None
    headers: tuple[tuple[str, bytes], ...] = ()


@dataclass
class _Delivery:
    body: list[bytes]
    record: list[_Record]
    consumer: Any


def _call(tenant: str, n: int, deadline_s: float = 60) -> bytes:
    call = ToolCallRequested(
        tenant_id=tenant, session_id=f"s-{tenant}", request_id=f"r-{tenant}",
        data=ToolCallRequestedData(
            call_id=f"{tenant}-{n}", tool_name="thinking", arguments={"n": n}, round=0,
            deadline=datetime.now(UTC) + timedelta(seconds=deadline_s),
            context=ToolContext(user_id="u", agent_id="a"),
        ),
    )  # fmt: skip
    return call.model_dump_json().encode()


Handle = Callable[[ToolCallRequested], Awaitable[None]]


def _fair(
    handler: Handle,
    *,
    concurrency: int,
    read_ahead: ReadAhead,
    slots: TenantSlots | None = None,
    tenant_max_local: int | None = None,
    **options: Any,
) -> tuple[FairConsumer, _Consumer]:
    redis = FakeAsyncRedis()
    settings = ServiceSettings(topic_prefix="unit.", commit_interval_ms=0)
    bus = EventBus(KafkaBroker("127.0.0.1:1"), settings, redis)
    slots = slots or TenantSlots(redis, "unit", cap=100, lease_s=30)
    fair = FairConsumer(
        bus, Topic.TOOL_CALLS, "tool-exec", handler,
        slots=slots, concurrency=concurrency, read_ahead=read_ahead, holder_prefix="unit",
        tenant_max_local=tenant_max_local, **options,
    )  # fmt: skip
    return fair, _Consumer({P0, P1})


async def _deliver(
    fair: FairConsumer, consumer: _Consumer, calls: list[tuple[int, str, int]]
) -> None:
    """One fetch: ``(partition, tenant, offset)`` per record."""
    records = [_Record(TOPIC, p, offset) for p, _, offset in calls]
    bodies = [_call(tenant, offset) for _, tenant, offset in calls]
    await fair._on_batch(_Delivery(bodies, records, consumer))


async def test_a_quiet_tenants_call_runs_before_a_flooders_backlog() -> None:
    ran: list[str] = []

    async def handle(call: ToolCallRequested) -> None:
        ran.append(call.tenant_id)

    fair, consumer = _fair(handle, concurrency=1, read_ahead=ReadAhead())
    flood = [(0, "b", offset) for offset in range(6)]
    await _deliver(fair, consumer, [*flood, (0, "c", 6)])
    await fair.start()
    try:
        await _poll(lambda: len(ran) == 7, "every call ran")
    finally:
        await fair.stop()
    assert ran.index("c") == 1  # behind one call of b, not six
    assert consumer.committed_offset(P0) == 7


@pytest.mark.parametrize("tenant_max_local", [None, 0], ids=["headroom", "no-local-cap"])
async def test_a_flooder_leaves_a_runner_of_the_replica_to_a_later_tenant(
    tenant_max_local: int | None,
) -> None:
    """Invariant 5 across replicas: the flooder's cap across replicas (here 100) does not
    stop it from taking every runner of the one replica that reads the quiet tenant's call;
    the per-replica share does. ``no-local-cap`` shows the starvation the share prevents."""
    release = asyncio.Event()
    ran: list[str] = []

    async def handle(call: ToolCallRequested) -> None:
        if call.tenant_id == "b":
            await release.wait()
        ran.append(call.tenant_id)

    fair, consumer = _fair(
        handle, concurrency=2, read_ahead=ReadAhead(), tenant_max_local=tenant_max_local
    )
    await fair.start()
    try:
        await _deliver(fair, consumer, [(0, "b", offset) for offset in range(4)])
        await _poll(lambda: fair.state()["running"] >= 1, "b's first call runs")
        await _deliver(fair, consumer, [(1, "c", 0)])
        if tenant_max_local is None:
            await _poll(lambda: ran == ["c"], "c ran while b's calls are held")
            # c's runner frees just after its handler returns: b holds one runner of two.
            await _poll(lambda: fair.state()["running"] == 1, "b holds one runner, not both")
        else:
            await _poll(lambda: fair.state()["running"] == 2, "b holds both runners")
            assert ran == []  # c waits for b's held calls: the starvation
        release.set()
        await _poll(lambda: sorted(ran) == ["b"] * 4 + ["c"], "every call ran")
    finally:
        release.set()
        await fair.stop()


async def test_calls_done_after_a_slow_one_are_not_committed_past_it() -> None:
    release = asyncio.Event()
    ran: list[int] = []

    async def handle(call: ToolCallRequested) -> None:
        if call.data.arguments["n"] == 0:
            await release.wait()
        ran.append(call.data.arguments["n"])

    fair, consumer = _fair(handle, concurrency=2, read_ahead=ReadAhead())
    await _deliver(fair, consumer, [(0, "b", 0), (0, "c", 1), (0, "d", 2), (0, "e", 3)])
    await fair.start()
    try:
        await _poll(lambda: sorted(ran) == [1, 2, 3], "the calls after the slow one ran")
        assert consumer.committed_offset(P0) == -1  # offset 0 still runs: nothing commits
        release.set()
        await _poll(lambda: consumer.committed_offset(P0) == 4, "the whole run committed")
    finally:
        await fair.stop()


async def test_a_partition_pauses_at_its_read_ahead_and_resumes_as_it_drains() -> None:
    release = asyncio.Event()

    async def handle(_call: ToolCallRequested) -> None:
        await release.wait()

    fair, consumer = _fair(
        handle, concurrency=1, read_ahead=ReadAhead(max_buffered=100, partition_buffer=3)
    )
    await _deliver(fair, consumer, [(0, "b", 0), (0, "b", 1), (0, "c", 2), (1, "c", 0)])
    assert consumer.paused_now == {P0}  # P1 has one record ahead: still fetched
    await fair.start()
    try:
        release.set()
        await _poll(lambda: consumer.paused_now == set(), "P0 resumed once drained")
    finally:
        await fair.stop()


async def test_the_whole_read_ahead_bound_pauses_every_partition() -> None:
    fair, consumer = _fair(
        _never, concurrency=1, read_ahead=ReadAhead(max_buffered=3, partition_buffer=10)
    )
    await _deliver(fair, consumer, [(0, "b", 0), (0, "b", 1), (1, "c", 0)])
    assert consumer.paused_now == {P0, P1}


async def _never(_call: ToolCallRequested) -> None:
    await asyncio.Event().wait()


async def test_a_tenant_at_its_cluster_cap_waits_until_a_killed_replicas_slot_expires() -> None:
    ran: list[str] = []

    async def handle(call: ToolCallRequested) -> None:
        ran.append(call.tenant_id)

    slots = TenantSlots(FakeAsyncRedis(), "unit", cap=1, lease_s=1.5)
    assert await slots.acquire("b", "killed-replica:0")  # held by a replica that died
    fair, consumer = _fair(handle, concurrency=2, read_ahead=ReadAhead(), slots=slots)
    await _deliver(fair, consumer, [(0, "b", 0), (0, "c", 1)])
    await fair.start()
    try:
        await _poll(lambda: ran == ["c"], "the other tenant ran at once")
        await _poll(lambda: ran == ["c", "b"], "b ran once the dead replica's lease ran out")
        await _poll(lambda: consumer.committed_offset(P0) == 2, "both committed")
    finally:
        await fair.stop()


async def test_a_revoked_partitions_queued_calls_are_dropped_for_its_new_owner() -> None:
    ran: list[int] = []

    async def handle(call: ToolCallRequested) -> None:
        ran.append(call.data.arguments["n"])

    fair, consumer = _fair(handle, concurrency=1, read_ahead=ReadAhead())
    await _deliver(fair, consumer, [(1, "b", 0), (0, "c", 5)])
    consumer.assigned = {P0}  # a rebalance moved P1 to another worker
    await fair.start()
    try:
        await _poll(lambda: ran == [5], "P0's call ran")
        assert fair.buffer.waiting() == 0
    finally:
        await fair.stop()
    assert P1 not in {p for c in consumer.commits for p in c}


@pytest.mark.parametrize("fails", [1, 2])
async def test_a_call_that_could_not_be_handled_durably_runs_again(fails: int) -> None:
    attempts: list[int] = []

    async def handle(call: ToolCallRequested) -> None:
        attempts.append(call.data.arguments["n"])

    fair, consumer = _fair(handle, concurrency=1, read_ahead=ReadAhead())
    real_mark = fair._bus._mark
    left = [fails]

    async def flaky_mark(group: str, message_id: str) -> None:
        if left[0] > 0:
            left[0] -= 1
            raise ConnectionError("redis away")
        await real_mark(group, message_id)

    fair._bus._mark = flaky_mark  # type: ignore[method-assign,assignment]
    await _deliver(fair, consumer, [(0, "b", 0)])
    await fair.start()
    try:
        await _poll(lambda: consumer.committed_offset(P0) == 1, "committed once it held")
    finally:
        await fair.stop()
    assert attempts == [0] * (fails + 1)


async def test_an_unreadable_record_is_dead_lettered_and_the_partition_goes_on() -> None:
    ran: list[int] = []

    async def handle(call: ToolCallRequested) -> None:
        ran.append(call.data.arguments["n"])

    fair, consumer = _fair(handle, concurrency=1, read_ahead=ReadAhead())
    letters: list[Any] = []

    async def publish(topic: Topic, message: Any) -> None:
        letters.append((topic, message))

    fair._bus.publish = publish  # type: ignore[method-assign]
    records = [_Record(TOPIC, 0, 0), _Record(TOPIC, 0, 1)]
    bodies = [b'{"type": "tool_call_requested", "tenant_id": ', _call("c", 1)]
    await fair._on_batch(_Delivery(bodies, records, consumer))
    await fair.start()
    try:
        await _poll(lambda: consumer.committed_offset(P0) == 2, "both offsets committed")
    finally:
        await fair.stop()
    assert ran == [1]
    [(topic, letter)] = letters
    assert topic is Topic.DLQ and letter.data.reason.startswith("undecodable")


async def test_a_partition_given_back_by_a_rebalance_is_paused_again_when_full() -> None:
    fair, consumer = _fair(
        _never, concurrency=1, read_ahead=ReadAhead(max_buffered=100, partition_buffer=2)
    )
    await _deliver(fair, consumer, [(0, "b", 0), (0, "b", 1)])
    assert consumer.paused_now == {P0}
    consumer.paused_now.clear()  # revoked and assigned again: aiokafka starts it unpaused
    await _deliver(fair, consumer, [(0, "b", 0), (0, "b", 1)])  # read again from the commit
    assert consumer.paused_now == {P0}


# -- One record of a key at a time, parked records, overdue records (sandbox.calls) ------


async def test_entries_of_one_key_run_one_at_a_time_in_offset_order() -> None:
    buffer = FairBuffer(ReadAhead())
    first = buffer.add(P0, 0, "b", "s1-a", key=b"s1")
    buffer.add(P0, 1, "b", "s1-b", key=b"s1")
    buffer.add(P0, 2, "b", "s2-a", key=b"s2")
    taken = [await buffer.take(_admit_all), await buffer.take(_admit_all)]
    assert [e.item for e in taken if e] == ["s1-a", "s2-a"]  # s1's second waits, s2 goes on
    assert await buffer.take(_admit_all) is None
    assert buffer.done(first) == 1
    later = await buffer.take(_admit_all)
    assert later is not None and later.item == "s1-b"


async def test_a_key_put_back_runs_before_its_later_records() -> None:
    buffer = FairBuffer(ReadAhead())
    buffer.add(P0, 0, "b", "s1-a", key=b"s1")
    buffer.add(P0, 1, "b", "s1-b", key=b"s1")
    first = await buffer.take(_admit_all)
    assert first is not None
    buffer.put_back(first)  # its handling was not durable: it runs again, first
    again = await buffer.take(_admit_all)
    assert again is first
    assert buffer.ready("b") is None  # s1's second waits for it
    buffer.release(again)  # a cancelled run frees the key as well
    ready = buffer.ready("b")
    assert ready is not None and ready.item == "s1-b"


async def test_without_keys_a_tenants_records_run_side_by_side() -> None:
    """tool-exec's calls (keyed by call id, added without a key) are not serialized."""
    buffer = FairBuffer(ReadAhead())
    for offset in range(3):
        buffer.add(P0, offset, "b", offset)
    taken = [await buffer.take(_admit_all) for _ in range(3)]
    assert [e.offset for e in taken if e] == [0, 1, 2]


def test_a_flooders_backlog_is_parked_so_the_partition_is_still_read() -> None:
    buffer = FairBuffer(ReadAhead(max_buffered=100, partition_buffer=3, partition_window=20))
    for offset in range(6):
        buffer.add(P0, offset, "b", offset)
    buffer.add(P0, 6, "c", 6)
    assert buffer.park() == 4  # down to three held bodies: b's two oldest and c's
    held = [(e.tenant_id, e.offset) for q in buffer._queues.values() for e in q if not e.parked]
    assert held == [("b", 0), ("b", 1), ("c", 6)]
    assert buffer.to_pause({P0}) == set()  # not paused: c's later records are read
    assert buffer.outstanding(P0) == 7  # nothing past b's parked records is committed


def test_with_parking_a_partition_pauses_at_its_window() -> None:
    buffer = FairBuffer(ReadAhead(max_buffered=100, partition_buffer=2, partition_window=4))
    for offset in range(4):
        buffer.add(P0, offset, "b", offset)
    buffer.park()
    assert buffer.to_pause({P0, P1}) == {P0}


class _Log:
    """What the fetch of parked records reads: the records delivered, by place."""

    def __init__(self) -> None:
        self.records: dict[tuple[TopicPartition, int], tuple[_Record, bytes]] = {}
        self.fetched: list[int] = []

    def keep(self, records: list[_Record], bodies: list[bytes]) -> None:
        for record, body in zip(records, bodies, strict=True):
            self.records[(TopicPartition(record.topic, record.partition), record.offset)] = (
                record,
                body,
            )

    async def fetch(self, partition: TopicPartition, offset: int) -> tuple[Any, bytes] | None:
        self.fetched.append(offset)
        return self.records.get((partition, offset))


async def _deliver_keyed(
    fair: FairConsumer,
    consumer: _Consumer,
    calls: list[tuple[str, str, int]],
    log: _Log | None = None,
    deadline_s: float = 60,
) -> None:
    """One fetch on P0: ``(tenant, key, offset)`` per record."""
    records = [_Record(TOPIC, 0, offset, key.encode()) for _, key, offset in calls]
    bodies = [_call(tenant, offset, deadline_s) for tenant, _, offset in calls]
    if log is not None:
        log.keep(records, bodies)
    await fair._on_batch(_Delivery(bodies, records, consumer))


@pytest.mark.parametrize("serialize", [True, False], ids=["by-key", "tool-exec"])
async def test_a_keys_records_do_not_overlap_while_other_keys_run(serialize: bool) -> None:
    release = asyncio.Event()
    running: set[int] = set()
    overlap: list[set[int]] = []

    async def handle(call: ToolCallRequested) -> None:
        running.add(call.data.arguments["n"])
        overlap.append(set(running))
        await release.wait()
        running.discard(call.data.arguments["n"])

    fair, consumer = _fair(
        handle, concurrency=3, read_ahead=ReadAhead(), tenant_max_local=0,
        serialize_keys=serialize,
    )  # fmt: skip
    await _deliver_keyed(fair, consumer, [("b", "s1", 0), ("b", "s1", 1), ("b", "s2", 2)])
    await fair.start()
    try:
        if serialize:
            await _poll(lambda: running == {0, 2}, "s1's first call and s2's run")
            assert fair.state()["running"] == 2  # s1's second waits though a runner is free
        else:
            await _poll(lambda: running == {0, 1, 2}, "all three run at once")
        release.set()
        await _poll(lambda: consumer.committed_offset(P0) == 3, "all committed")
    finally:
        release.set()
        await fair.stop()
    if serialize:
        assert not any({0, 1} <= seen for seen in overlap)


async def test_a_quiet_tenant_is_read_past_a_flooders_backlog_in_its_partition() -> None:
    """B's held calls are more than the partition's read-ahead: parked, not a pause, so
    C's later call in the same partition is read and runs while B's still run."""
    release = asyncio.Event()
    ran: list[str] = []

    async def handle(call: ToolCallRequested) -> None:
        if call.tenant_id == "b":
            await release.wait()
        ran.append(f"{call.tenant_id}{call.data.arguments['n']}")

    log = _Log()
    slots = TenantSlots(FakeAsyncRedis(), "unit", cap=1, lease_s=30)
    fair, consumer = _fair(
        handle, concurrency=2, slots=slots, serialize_keys=True, fetch=log.fetch,
        read_ahead=ReadAhead(max_buffered=100, partition_buffer=2, partition_window=50),
    )  # fmt: skip
    await fair.start()
    try:
        flood = [("b", f"s{n}", n) for n in range(6)]
        await _deliver_keyed(fair, consumer, flood, log)
        assert consumer.paused_now == set()  # parked, not paused
        await _deliver_keyed(fair, consumer, [("c", "c1", 6)], log)
        await _poll(lambda: ran == ["c6"], "c's call ran while b's are held")
        await _poll(lambda: fair.state()["running"] == 1, "c's runner is free again")
        assert await slots.held("b") == 1  # b at its cap of 1
        assert consumer.committed_offset(P0) == -1  # b's first call still runs
        release.set()
        await _poll(lambda: consumer.committed_offset(P0) == 7, "every call ran, committed")
    finally:
        release.set()
        await fair.stop()
    assert sorted(ran) == sorted(["c6", *(f"b{n}" for n in range(6))])
    assert log.fetched == [1, 2, 3, 4, 5]  # b's parked calls, read again in order


async def test_a_call_waiting_past_its_deadline_is_answered_and_committed() -> None:
    release = asyncio.Event()
    ran: list[int] = []
    overdue: list[tuple[int, float]] = []

    async def handle(call: ToolCallRequested) -> None:
        if call.data.arguments["n"] == 0:
            await release.wait()
        ran.append(call.data.arguments["n"])

    async def answer(call: ToolCallRequested, waited_s: float) -> None:
        overdue.append((call.data.arguments["n"], waited_s))

    slots = TenantSlots(FakeAsyncRedis(), "unit", cap=1, lease_s=30)
    fair, consumer = _fair(
        handle, concurrency=2, slots=slots, read_ahead=ReadAhead(),
        deadline_of=lambda call: call.data.deadline, overdue=answer,
    )  # fmt: skip
    await fair.start()
    try:
        await _deliver_keyed(fair, consumer, [("b", "s0", 0)])
        await _poll(lambda: fair.state()["running"] == 1, "b's first call holds its slot")
        await _deliver_keyed(fair, consumer, [("b", "s1", 1)], deadline_s=0.3)
        await _poll(lambda: len(overdue) == 1, "the waiting call was answered")
        assert overdue[0][0] == 1 and overdue[0][1] > 0
        assert ran == []  # it never ran, and b's first call still holds the slot
        assert await slots.held("b") == 1
        release.set()
        await _poll(lambda: consumer.committed_offset(P0) == 2, "both committed")
    finally:
        release.set()
        await fair.stop()
    assert ran == [0]
