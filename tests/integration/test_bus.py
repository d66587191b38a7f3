"""The EventBus contract as one suite, run twice: against FastStream's in-memory broker
(``TestKafkaBroker``) and against the real Kafka (the ``kafka`` marker). Both halves assert
the same: publish/consume, retry then dead-letter, id-based dedupe, a later version's
records read or dead-lettered as such, type-header filters, batches in record order.

Real Kafka only, each saying why: the broadcast (positions at the latest offset and
several processes are properties of a real broker's partitions) and the coalesced commits
(offsets exist only on a real broker)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from aiokafka.errors import KafkaConnectionError
from weft_contracts import (
    CompleteData,
    CompleteEvent,
    ThoughtData,
    ThoughtEvent,
    Topic,
    TurnStatus,
)
from weft_platform.runtime import ServiceRuntime

from tests.integration.kafka_helpers import (
    dead_letters,
    in_memory_runtime,
    own_topics,
    service_runtime,
)

RETRIES: dict[str, Any] = {"consumer_attempts": 3, "consumer_retry_backoff_s": 0.01}


@pytest.fixture(params=["memory", pytest.param("kafka", marks=pytest.mark.kafka)])
async def runtime(
    request: pytest.FixtureRequest, infra: dict[str, str]
) -> AsyncIterator[ServiceRuntime]:
    """A service runtime on the in-memory broker, then on the real Kafka (own topics)."""
    if request.param == "kafka":
        async with service_runtime(infra, "bus-test", **RETRIES) as rt:
            yield rt
    else:
        async with in_memory_runtime(infra, "bus-test", **RETRIES) as rt:
            yield rt


@pytest.fixture
async def kafka_runtime(infra: dict[str, str]) -> AsyncIterator[ServiceRuntime]:
    """A service runtime on the real Kafka only, for the real-broker cases."""
    async with service_runtime(infra, "bus-test", **RETRIES) as rt:
        yield rt


class DeadLetters:
    """The dead letters of a runtime's deployment, read through its own broker (a
    subscriber of the DLQ topic), so both halves of the suite read them the same way.
    Create it before the broker starts."""

    def __init__(self, runtime: ServiceRuntime):
        self.letters: list[dict[str, Any]] = []
        self._arrived = asyncio.Event()
        runtime.broker.subscriber(
            runtime.bus.topic_name(Topic.DLQ),
            group_id=runtime.settings.topic_prefix + "dlq-reader",
            auto_offset_reset="earliest",
        )(self._on_letter)

    async def _on_letter(self, letter: dict[str, Any]) -> None:
        self.letters.append(letter)
        self._arrived.set()

    async def first(self, count: int) -> list[dict[str, Any]]:
        """The letters once there are ``count`` of them (fails after 30 s)."""
        async with asyncio.timeout(30):
            while len(self.letters) < count:
                self._arrived.clear()
                await self._arrived.wait()
        return list(self.letters)


def _event(delta: str) -> ThoughtEvent:
    return ThoughtEvent(tenant_id="t", session_id="s", request_id="r",
                        data=ThoughtData(round=0, delta=delta))  # fmt: skip


async def test_failing_handler_is_retried_then_dead_lettered_and_next_message_flows(
    runtime: ServiceRuntime,
) -> None:
    attempts: dict[str, int] = {}
    handled = asyncio.Event()

    async def handler(event: Any) -> None:
        attempts[event.data.delta] = attempts.get(event.data.delta, 0) + 1
        if event.data.delta == "poison":
            raise RuntimeError("cannot process poison")
        handled.set()

    runtime.bus.consume(Topic.AGENT_EVENTS, "g", handler)
    dead = DeadLetters(runtime)
    await runtime.broker.start()
    await runtime.bus.publish(Topic.AGENT_EVENTS, _event("poison"))
    await runtime.bus.publish(Topic.AGENT_EVENTS, _event("fine"))
    await asyncio.wait_for(handled.wait(), 30)

    assert attempts == {"poison": 3, "fine": 1}
    [letter] = await dead.first(1)
    assert letter["data"]["reason"] == "handler_failed: cannot process poison"
    assert letter["data"]["error_type"] == "RuntimeError"
    assert letter["tenant_id"] == "t" and letter["data"]["consumer_group"].endswith("g")


async def test_redelivered_message_is_handled_once(runtime: ServiceRuntime) -> None:  # inv. 3
    seen: list[str] = []
    twice = asyncio.Event()

    async def handler(event: Any) -> None:
        seen.append(event.id)
        if event.data.delta == "after":
            twice.set()

    runtime.bus.consume(Topic.AGENT_EVENTS, "g", handler)
    await runtime.broker.start()
    event = _event("dup")
    await runtime.bus.publish(Topic.AGENT_EVENTS, event)
    await runtime.bus.publish(Topic.AGENT_EVENTS, event)  # same id: a redelivery
    await runtime.bus.publish(Topic.AGENT_EVENTS, _event("after"))
    await asyncio.wait_for(twice.wait(), 30)
    assert seen.count(event.id) == 1


def _written_by_a_later_version(delta: str, schema_version: int = 1) -> bytes:
    """A thought as a later Weft could write it: a field this version lacks, and
    ``schema_version`` (a bump means a breaking change, weft_contracts.compat)."""
    body = json.loads(_event(delta).model_dump_json())
    body["data"]["added_later"] = True
    return json.dumps({**body, "schema_version": schema_version}).encode()


@pytest.mark.parametrize("batch", [False, True])
async def test_a_later_versions_records_are_read_or_dead_lettered_as_such(
    runtime: ServiceRuntime, batch: bool
) -> None:
    """Rolling deploys: a consumer reads a later version's additions (ignoring the new
    field), dead-letters a newer schema_version with that reason, and goes on."""
    handled: list[str] = []
    done = asyncio.Event()

    async def handle(event: Any) -> None:
        handled.append(event.data.delta)
        if event.data.delta == "last":
            done.set()

    async def handle_batch(events: list[Any]) -> None:
        for event in events:
            await handle(event)

    if batch:
        runtime.bus.consume_batch(Topic.AGENT_EVENTS, "g", handle_batch)
    else:
        runtime.bus.consume(Topic.AGENT_EVENTS, "g", handle)
    dead = DeadLetters(runtime)
    await runtime.broker.start()
    name = runtime.bus.topic_name(Topic.AGENT_EVENTS)
    for body in (
        _written_by_a_later_version("added"),
        _written_by_a_later_version("newer", schema_version=2),
        _written_by_a_later_version("last"),
    ):
        await runtime.broker.publish(body, name, key=b"s")
    await asyncio.wait_for(done.wait(), 30)

    assert handled == ["added", "last"]
    [letter] = await dead.first(1)
    assert letter["data"]["reason"] == (
        "unsupported_schema_version: message schema_version 2; this reader knows up to 1"
    )
    assert letter["data"]["error_type"] == "UnsupportedSchemaVersion"
    assert '"newer"' in letter["data"]["raw"] and letter["tenant_id"] == "t"


def _complete() -> CompleteEvent:
    return CompleteEvent(tenant_id="t", session_id="s", request_id="r",
                         data=CompleteData(status=TurnStatus.COMPLETED))  # fmt: skip


async def _publish_mixed(runtime: ServiceRuntime) -> tuple[str, str]:
    """A typed thought (to skip), a thought without a type header (decoded: the filter
    cannot know it), and a complete, on one partition; the ids of the last two."""
    await runtime.bus.publish(Topic.AGENT_EVENTS, _event("skipped"))
    untyped = _event("untyped")
    await runtime.broker.publish(
        untyped.model_dump_json().encode(),
        runtime.bus.topic_name(Topic.AGENT_EVENTS),
        key=untyped.key(),
    )
    complete = _complete()
    await runtime.bus.publish(Topic.AGENT_EVENTS, complete)
    return untyped.id, complete.id


@pytest.mark.parametrize("linger_ms", [None, 300])
async def test_consume_with_types_skips_other_records_by_header(
    runtime: ServiceRuntime, linger_ms: int | None
) -> None:
    """Consumers that need a few event types (memory, suggestions) do not decode the rest;
    a lingering one (memory) still gets records below the fetch size."""
    seen: list[str] = []
    done = asyncio.Event()

    async def handler(event: Any) -> None:
        seen.append(event.id)
        if event.type == "complete":
            done.set()

    runtime.bus.consume(Topic.AGENT_EVENTS, "g", handler, types={"complete"}, linger_ms=linger_ms)
    await runtime.broker.start()
    expected = await _publish_mixed(runtime)
    await asyncio.wait_for(done.wait(), 30)
    assert tuple(seen) == expected


async def test_consume_batch_with_types_skips_other_records_by_header(
    runtime: ServiceRuntime,
) -> None:
    """The same for batches; a lingering consumer still gets records below the fetch size."""
    seen: list[str] = []
    done = asyncio.Event()

    async def handler(events: list[Any]) -> None:
        seen.extend(event.id for event in events)
        if any(event.type == "complete" for event in events):
            done.set()

    runtime.bus.consume_batch(Topic.AGENT_EVENTS, "g", handler, types={"complete"}, linger_ms=300)
    await runtime.broker.start()
    expected = await _publish_mixed(runtime)
    await asyncio.wait_for(done.wait(), 30)
    assert tuple(seen) == expected


async def test_a_batch_handler_gets_the_records_in_record_order(runtime: ServiceRuntime) -> None:
    """One key, one partition: the batches, joined, are the records in the order they were
    published, none larger than ``max_records`` (the real broker hands a fetch as one batch,
    the in-memory one each record as it is published)."""
    seen: list[str] = []
    sizes: list[int] = []
    done = asyncio.Event()

    async def handler(events: list[Any]) -> None:
        sizes.append(len(events))
        seen.extend(event.data.delta for event in events)
        if seen[-1:] == ["9"]:
            done.set()

    runtime.bus.consume_batch(Topic.AGENT_EVENTS, "g", handler, max_records=4)
    await runtime.broker.start()
    for i in range(10):
        await runtime.bus.publish(Topic.AGENT_EVENTS, _event(str(i)))
    await asyncio.wait_for(done.wait(), 30)
    assert seen == [str(i) for i in range(10)]
    assert max(sizes) <= 4


@pytest.mark.kafka
async def test_broadcast_reaches_every_process_from_the_latest_offset(
    infra: dict[str, str], kafka_runtime: ServiceRuntime
) -> None:
    """tool-exec's turn-end cleanup: every process hears every ``complete``, nothing
    published before it started, and a handler failure does not stop it. Real Kafka only:
    "from the latest offset" and "every process" are about a real broker's partitions and
    separate consumers; the in-memory broker has neither offsets nor processes."""
    runtime = kafka_runtime
    prefix = runtime.settings.topic_prefix
    async with (
        service_runtime(infra, "bus-publisher", prefix=prefix, start=True) as publisher,
        service_runtime(infra, "bus-peer", prefix=prefix) as peer,
    ):
        await publisher.bus.publish(Topic.AGENT_EVENTS, _complete())  # before: not heard
        heard: dict[str, list[str]] = {"runtime": [], "peer": []}
        ever: list[str] = []

        def listener(name: str) -> Callable[[Any], Awaitable[None]]:
            async def on_event(event: Any) -> None:
                heard[name].append(event.request_id)
                ever.append(event.request_id)
                if event.request_id == "poison":
                    raise RuntimeError("cleanup failed")

            return on_event

        runtime.bus.broadcast(Topic.AGENT_EVENTS, listener("runtime"), types={"complete"})
        peer.bus.broadcast(Topic.AGENT_EVENTS, listener("peer"), types={"complete"})
        await runtime.broker.start()
        await peer.broker.start()
        # Both are positioned once both hear a probe (a group-less consumer finds the
        # latest offset on its first fetch).
        for _ in range(100):
            await publisher.bus.publish(Topic.AGENT_EVENTS, _complete_of("probe"))
            await asyncio.sleep(0.1)
            if all("probe" in requests for requests in heard.values()):
                break
        for requests in heard.values():
            requests.clear()
        await publisher.bus.publish(Topic.AGENT_EVENTS, _event("skipped by its header"))
        await publisher.broker.publish(
            b"not json", prefix + Topic.AGENT_EVENTS.value, key=b"s", headers={"type": "complete"}
        )  # undecodable: skipped here (group consumers dead-letter it)
        for request_id in ("poison", "r1", "r2"):
            await publisher.bus.publish(Topic.AGENT_EVENTS, _complete_of(request_id))
        await _until(lambda: all(r[-1:] == ["r2"] for r in heard.values()))
        for requests in heard.values():
            assert [r for r in requests if r != "probe"] == ["poison", "r1", "r2"]
        assert "r" not in ever  # the complete published before they started


def _complete_of(request_id: str) -> CompleteEvent:
    return CompleteEvent(tenant_id="t", session_id="s", request_id=request_id,
                         data=CompleteData(status=TurnStatus.COMPLETED))  # fmt: skip


async def _until(condition: Callable[[], bool]) -> None:
    """Wait up to 15 s for ``condition`` (the caller asserts what it needs after)."""
    for _ in range(300):
        if condition():
            return
        await asyncio.sleep(0.05)


@pytest.mark.kafka
async def test_handled_offsets_are_committed_together_and_a_new_consumer_resumes_after_them(
    infra: dict[str, str],
) -> None:
    """Commits are coalesced (one request per interval, not per record), yet a
    consumer that takes over the group reads on after the last handled record; a record
    handled after the last commit is read again (at-least-once, absorbed by dedupe). Real
    Kafka only: committed offsets and a group's takeover exist only on a real broker."""
    # The second runtime joins the first one's topics after it closed: both use topics the
    # test owns.
    async with own_topics(infra) as prefix:
        async with service_runtime(
            infra, "commit-a", prefix=prefix, start=True, commit_interval_ms=300
        ) as first:
            seen: list[str] = []
            commits: list[dict[Any, int]] = []

            async def handler(event: Any) -> None:
                seen.append(event.data.delta)

            first.bus.consume(Topic.AGENT_EVENTS, "c", handler, dedupe=False)
            await first.broker.start()
            subscriber = next(iter(first.broker.subscribers))
            for i in range(20):
                await first.bus.publish(Topic.AGENT_EVENTS, _event(f"early-{i}"))
            await _until(lambda: len(seen) == 20)
            assert sorted(seen) == sorted(f"early-{i}" for i in range(20))
            consumer = subscriber.consumer  # type: ignore[attr-defined]
            real_commit = consumer.commit

            async def counted(offsets: Any = None) -> None:
                commits.append(dict(offsets or {}))
                await real_commit(offsets)

            consumer.commit = counted
            await asyncio.sleep(0.6)  # past the interval: the handled records are committed
            for i in range(20):
                await first.bus.publish(Topic.AGENT_EVENTS, _event(f"late-{i}"))
            await _until(lambda: len(seen) == 40)
            assert len(seen) == 40
            await asyncio.sleep(0.6)
            # Per record it would be 20 commits; per 300 ms interval a few.
            assert 1 <= len(commits) < 10, f"one commit per interval, not per record: {commits}"
            # A crash right after one more record: it is handled but never committed.
            await first.bus.publish(Topic.AGENT_EVENTS, _event("uncommitted"))
            await _until(lambda: "uncommitted" in seen)
            for pending in first.bus._commits:  # what a crash loses: the commit not yet sent
                pending._offsets.clear()
        async with service_runtime(infra, "commit-b", prefix=prefix) as second:
            again: list[str] = []
            got = asyncio.Event()

            async def handler_b(event: Any) -> None:
                again.append(event.data.delta)
                if event.data.delta == "next":
                    got.set()

            second.bus.consume(Topic.AGENT_EVENTS, "c", handler_b, dedupe=False)
            await second.broker.start()
            await second.bus.publish(Topic.AGENT_EVENTS, _event("next"))
            await asyncio.wait_for(got.wait(), 60)
            assert again == ["uncommitted", "next"]  # one key, one partition: in order


class DeadLetterOutage:
    """``bus.publish`` that cannot write dead letters while ``down`` (as when the broker
    is away), and commits of the consumer noted as they are sent."""

    def __init__(self, runtime: ServiceRuntime):
        self.down = True
        self.refused = 0
        self.commits: list[dict[Any, int]] = []
        self._publish = runtime.bus.publish
        runtime.bus.publish = self._failing  # type: ignore[method-assign]

    async def _failing(self, topic: Topic, message: Any) -> None:
        if topic is Topic.DLQ and self.down:
            self.refused += 1
            raise KafkaConnectionError("broker away")
        await self._publish(topic, message)

    def watch_commits(self, runtime: ServiceRuntime) -> None:
        consumer = next(iter(runtime.broker.subscribers)).consumer  # type: ignore[attr-defined]
        real_commit = consumer.commit

        async def noted(offsets: Any = None) -> None:
            self.commits.append({tp.partition: offset for tp, offset in (offsets or {}).items()})
            await real_commit(offsets)

        consumer.commit = noted


@pytest.mark.kafka
async def test_a_record_whose_dead_letter_cannot_be_written_is_read_again_never_skipped(
    infra: dict[str, str],
) -> None:  # invariant 3
    """A handler fails and its dead letter cannot be written either: the record is not
    skipped, the record behind it on its partition is not handled before it, and no
    commit passes it; once dead letters can be written again, it is dead-lettered and
    the next record flows. Kafka only: offsets and seeks exist only on a real broker."""
    async with service_runtime(
        infra, "redeliver", commit_interval_ms=0, redelivery_backoff_max_s=0.1, **RETRIES
    ) as rt:
        tries: dict[str, int] = {}
        seen: list[str] = []

        async def handler(event: Any) -> None:
            tries[event.data.delta] = tries.get(event.data.delta, 0) + 1
            if event.data.delta == "poison":
                raise RuntimeError("cannot process poison")
            seen.append(event.data.delta)

        rt.bus.consume(Topic.AGENT_EVENTS, "g", handler)
        outage = DeadLetterOutage(rt)
        await rt.broker.start()
        outage.watch_commits(rt)
        await rt.bus.publish(Topic.AGENT_EVENTS, _event("poison"))  # one key: one partition,
        await rt.bus.publish(Topic.AGENT_EVENTS, _event("after"))  # offsets 0 and 1
        await _until(lambda: outage.refused >= 3)
        assert seen == [] and "after" not in tries, "the next record overtook the failed one"
        assert outage.commits == [], "a commit passed the record that was not handled"
        assert tries["poison"] >= 3 * 3, "the record was handed back and tried again"

        outage.down = False
        await _until(lambda: seen == ["after"])
        assert seen == ["after"]
        [letter] = await dead_letters(rt, 1)
        assert letter["data"]["reason"] == "handler_failed: cannot process poison"
        await _until(lambda: any(2 in c.values() for c in outage.commits))
        assert max(o for c in outage.commits for o in c.values()) == 2


@pytest.mark.kafka
async def test_a_batch_whose_dead_letter_cannot_be_written_is_read_again(
    infra: dict[str, str],
) -> None:  # invariant 3
    """``consume_batch``: the handler took the batch, but the undecodable record in it
    cannot be dead-lettered: the batch is handed back, uncommitted, and read again (its
    handler is idempotent by contract) until the dead letter is written."""
    async with service_runtime(
        infra, "redeliver-batch", commit_interval_ms=0, redelivery_backoff_max_s=0.1, **RETRIES
    ) as rt:
        batches: list[list[str]] = []

        async def handler(events: list[Any]) -> None:
            batches.append([e.data.delta for e in events])

        rt.bus.consume_batch(Topic.AGENT_EVENTS, "b", handler)
        outage = DeadLetterOutage(rt)
        await rt.broker.start()
        outage.watch_commits(rt)
        topic = rt.bus.topic_name(Topic.AGENT_EVENTS)
        await rt.broker.publish(b"not json", topic, key=b"s")  # offset 0, partition of "s"
        await rt.bus.publish(Topic.AGENT_EVENTS, _event("fine"))  # offset 1
        await _until(lambda: outage.refused >= 3)
        assert outage.commits == [], "a commit passed the record that was not dead-lettered"
        assert batches and all(b == ["fine"] for b in batches)  # the same batch, read again

        outage.down = False
        [letter] = await dead_letters(rt, 1)
        assert letter["data"]["reason"].startswith("undecodable")
        await _until(lambda: any(2 in c.values() for c in outage.commits))
        assert max(o for c in outage.commits for o in c.values()) == 2
