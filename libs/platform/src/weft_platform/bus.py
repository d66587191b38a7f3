"""The Kafka bus: publish envelopes, consume them at least once, dead-letter what is bad.

Every consumer goes through :meth:`EventBus.consume`, which owns the failure rules of
STYLE principle 4 for infrastructure errors: an undecodable record is dead-lettered at
once with the reason (records are read by ``weft_contracts.compat``'s rule: unknown
fields ignored, a newer ``schema_version`` dead-lettered as such); a handler that raises
is retried ``consumer_attempts`` times, then dead-lettered; the consumer itself never
stops. A record's offset is committed only after its handler returned (or its dead letter
was written), so a crash hands the record back to Kafka; a record that could be neither
handled nor dead-lettered (the broker is away) is read again, never skipped
(:class:`_Redelivery`). Publishes wait out a broker outage (:func:`create_broker`).
Commits are coalesced (``commit_interval_ms``): one commit request per consumer and
interval instead of one per record, since a commit is a broker round trip that every
consumer group would pay for every event. A crash or a rebalance therefore hands back up
to one interval of handled records, which the id-based dedupe (or an idempotent handler)
absorbs.
:meth:`EventBus.consume_batch` is the same contract for a whole fetch at a time: one
handler call per batch, for consumers whose cost is per round trip.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass
from itertools import chain
from typing import Any

import structlog
from aiokafka import AIOKafkaConsumer
from aiokafka.errors import KafkaError
from aiokafka.structs import ConsumerRecord, TopicPartition
from faststream import AckPolicy
from faststream.kafka import KafkaBroker
from faststream.kafka.subscriber.usecase import BatchSubscriber
from faststream.message import StreamMessage
from pydantic import TypeAdapter, ValidationError
from redis.asyncio import Redis
from weft_contracts import DeadLetter, DeadLetterData, Envelope, Topic, UnsupportedSchemaVersion
from weft_contracts.compat import read_json
from weft_contracts.topics import TOPIC_MODELS

from weft_platform import tracing
from weft_platform.metrics import DEAD_LETTERS, KAFKA_CONSUMER_LAG
from weft_platform.record_credentials import RecordCheck
from weft_platform.settings import ServiceSettings

log = structlog.get_logger(__name__)

LINGER_BYTES = 64 * 1024
"""A lingering consumer's fetch is answered once this much is there (or its time is up)."""

REFUSED = "credential_rejected"
"""Dead letter reason of a record whose credential is missing, invalid or another tenant's."""

Handler = Callable[[Any], Awaitable[None]]
BatchHandler = Callable[[list[Any]], Awaitable[None]]


@dataclass(frozen=True)
class Logged:
    """A decoded record and where it sits in its topic (``consume_batch(positions=True)``):
    for consumers that derive ids from the log itself, so that writing the log again
    gives the same ids."""

    event: Any
    partition: int
    offset: int

    @property
    def id(self) -> str:
        """The event's envelope id."""
        return str(self.event.id)


def create_broker(settings: ServiceSettings) -> KafkaBroker:
    """A broker for one service process; the producer waits for the leader's ack and
    waits out a broker outage of up to ``publish_window_s``.

    aiokafka resends a batch on every retriable error (connection refused, no leader,
    request timed out) ``retry_backoff_ms`` apart until it is ``request_timeout_ms`` old,
    then fails it: that age is the window. A partition has one batch in flight at a
    time, so a resend never overtakes a later record (per-partition order, invariant
    1); a resend of a batch the broker had written but whose answer was lost is a
    duplicate with the same envelope ids, which consumers drop (invariant 3).
    Idempotence (``enable_idempotence``) is off on purpose: in aiokafka 0.14 a batch
    that expires while the broker is away (no leader) leaves the producer's sequence
    numbers out of step, and every later publish of the process then fails with
    ``OutOfOrderSequenceNumber`` (seen against the local broker after a 50 s outage).
    The connection authenticates as the service's own principal when the settings say so
    (``WEFT_KAFKA_SECURITY_PROTOCOL``, :class:`~weft_platform.settings.KafkaAccess`).
    """
    return KafkaBroker(
        settings.kafka_bootstrap,
        security=settings.faststream_security(),
        client_id=f"weft-{settings.service_name}",
        acks="all",
        request_timeout_ms=int(settings.publish_window_s * 1000),
        allow_auto_create_topics=False,
        logger=logging.getLogger("weft.bus"),
        log_level=logging.DEBUG,  # per-message "Received/Processed" lines only when debugging
    )


@dataclass(frozen=True, slots=True)
class _Delivery:
    """What a consumer's handler gets: the bytes (decoding is ours to report), the
    aiokafka record (for a batch: lists of both, in record order) and its consumer."""

    body: Any
    record: Any
    consumer: Any


class PromptBatchSubscriber(BatchSubscriber):
    """FastStream's Kafka batch subscriber without its idle sleep.

    After a fetch that found nothing, FastStream 0.7 sleeps ``batch_timeout_ms`` before
    the next ``getmany``, although ``getmany`` had already waited that long. A record that
    arrives during the sleep waits for it: with the 100 ms default, the first event after
    a quiet spell (a turn's first event, the first token after a model's think time) would
    reach the gateway's projector up to that much late (``bench/batch_idle_latency.py``
    measures it).
    Without the sleep, ``getmany``'s own wait is the poll: it returns as soon as a record
    is fetched, and the loop does not spin when nothing comes.
    """

    __slots__ = ()

    async def get_msg(self, consumer: AIOKafkaConsumer) -> tuple[ConsumerRecord[Any, Any], ...]:
        fetched = await consumer.getmany(
            timeout_ms=self.batch_timeout_ms, max_records=self.max_records
        )
        return tuple(chain.from_iterable(fetched.values()))


def _prompt(subscriber: Any) -> None:
    """Make a batch subscriber a :class:`PromptBatchSubscriber` (the broker builds the
    subscriber itself; the subclass adds no state, only the one method)."""
    if type(subscriber) is not BatchSubscriber:
        raise TypeError(f"expected FastStream's BatchSubscriber, got {type(subscriber)!r}")
    subscriber.__class__ = PromptBatchSubscriber


async def _delivery(message: StreamMessage[Any]) -> _Delivery:
    """Decoder that hands the handler the record itself. A ``KafkaMessage`` context
    parameter would do the same, but FastStream resolves context parameters in a worker
    thread, one thread hop per consumed record in every service."""
    return _Delivery(message.body, message.raw_message, getattr(message, "consumer", None))


class _Commits:
    """Offsets of one consumer's handled records, committed together.

    A record counts as handled once its handler returned (or it was skipped, dead-lettered
    or found a duplicate). The first handled record after a commit schedules the next one
    ``interval_s`` later; with ``interval_s`` 0 every record is committed before the next
    is read. Records of one subscriber are handled one at a time, in partition order, so
    the highest handled offset per partition is a safe commit point.
    """

    def __init__(self, group_id: str, interval_s: float):
        self._group = group_id
        self._interval = interval_s
        self._offsets: dict[TopicPartition, int] = {}
        self._consumer: Any = None
        self._scheduled: asyncio.Task[None] | None = None
        self._lag = KAFKA_CONSUMER_LAG.group(group_id)  # read when Prometheus scrapes

    def arrived(self, consumer: Any, record: Any, *, first_only: bool = False) -> None:
        """``record`` is being handled: the lag counts it until it is. ``first_only``: only
        when no position of its partition is known yet (a consumer that reads ahead of
        what it handled, whose position moves with :meth:`advanced`)."""
        if isinstance(consumer, AIOKafkaConsumer):
            self._lag.at(consumer, record.topic, record.partition, record.offset, first_only)

    async def handled(self, consumer: Any, records: Sequence[Any]) -> None:
        """Note ``records`` (in partition order) as handled; commit now or schedule it."""
        if not isinstance(consumer, AIOKafkaConsumer):
            return  # FastStream's in-memory test broker: nothing to commit
        self._consumer = consumer
        for record in records:  # the last one per partition counts
            self._offsets[TopicPartition(record.topic, record.partition)] = record.offset + 1
            self._lag.at(consumer, record.topic, record.partition, record.offset + 1)
        if self._interval <= 0:
            await self.flush()
        elif self._scheduled is None:
            self._scheduled = asyncio.create_task(self._later(), name=f"commit:{self._group}")

    async def advanced(self, consumer: Any, offsets: dict[TopicPartition, int]) -> None:
        """Note commit offsets computed by the caller (a consumer that handles records out
        of partition order and knows which prefix of each partition is handled)."""
        if not isinstance(consumer, AIOKafkaConsumer):
            return
        self._consumer = consumer
        self._offsets.update(offsets)
        for partition, offset in offsets.items():
            self._lag.at(consumer, partition.topic, partition.partition, offset)
        if self._interval <= 0:
            await self.flush()
        elif self._scheduled is None:
            self._scheduled = asyncio.create_task(self._later(), name=f"commit:{self._group}")

    async def _later(self) -> None:
        await asyncio.sleep(self._interval)
        self._scheduled = None
        await self.flush()

    async def flush(self) -> None:
        """Commit what was handled since the last commit."""
        if not self._offsets:
            return
        offsets, self._offsets = self._offsets, {}
        try:
            await self._consumer.commit(offsets)
        except KafkaError as exc:
            # A rebalance moved the partitions: their new owner reads on from the last
            # commit, and dedupe (or an idempotent handler) absorbs the records read again.
            log.warning("commit_skipped", group=self._group, error=repr(exc))

    async def close(self) -> None:
        """Commit what is pending now (shutdown), without waiting for the interval."""
        if self._scheduled is not None:
            self._scheduled.cancel()
            self._scheduled = None
        await self.flush()


class _Redelivery:
    """What a group consumer does with a record it could not durably handle: a handler
    that failed and whose dead letter could not be written either (the broker is away),
    or a failure of the bus's own steps (the dedupe lookup in Redis).

    Such a record is not skipped: FastStream would log the exception and read on, and
    the next record's commit would pass the failed one. Instead its partition is sought
    back to it (nothing after it is handled first: partition order holds) and read again
    after a pause that doubles, from ``consumer_retry_backoff_s`` up to
    ``redelivery_backoff_max_s``, while the failures go on. The consumer never stops.
    """

    def __init__(self, settings: ServiceSettings):
        self._first: float = settings.consumer_retry_backoff_s or 0.05  # never a busy loop
        self._cap: float = settings.redelivery_backoff_max_s
        self._failures = 0

    def reset(self) -> None:
        """A record was handled: the next failure starts from the shortest pause."""
        self._failures = 0

    async def hand_back(
        self, group_id: str, consumer: Any, records: Sequence[Any], exc: Exception
    ) -> None:
        """Seek ``records`` back to be read again, after the pause."""
        if not isinstance(consumer, AIOKafkaConsumer):
            raise exc  # FastStream's in-memory test broker: no offsets to seek
        first = records[0]
        log.error(
            "record_handed_back",
            group=group_id,
            topic=first.topic,
            partition=first.partition,
            offset=first.offset,
            records=len(records),
            error=repr(exc),
            exc_info=exc,
        )
        _rewind(consumer, tuple(records))
        await asyncio.sleep(self.next_pause())

    def next_pause(self) -> float:
        """The pause before the next read of a handed-back record (it doubles up to the cap
        while failures go on)."""
        pause = min(self._cap, self._first * float(2**self._failures))
        self._failures = min(self._failures + 1, 32)
        return pause


class EventBus:
    """Publishes Weft envelopes and registers consumers with decode/retry/DLQ rules."""

    def __init__(
        self,
        broker: KafkaBroker,
        settings: ServiceSettings,
        redis: Redis | None = None,
        *,
        records: RecordCheck | None = None,
    ):
        """``records``: the credential check of consumed records (every service process
        has one, ``create_runtime``); without it records are not checked."""
        self.broker = broker
        self._settings = settings
        self._redis = redis
        self._records = records
        self._commits: list[_Commits] = []

    def topic_name(self, topic: Topic) -> str:
        """The Kafka name of ``topic`` in this deployment (with ``topic_prefix``)."""
        return self._settings.topic_prefix + topic.value

    async def publish(self, topic: Topic, message: Envelope) -> None:
        """Publish one envelope keyed by its :meth:`Envelope.key`; waits for the ack. An
        envelope without a ``traceparent`` gets the current span's (``_traced``)."""
        message = _traced(message)
        await self.broker.publish(
            message.model_dump_json().encode(),
            self.topic_name(topic),
            key=message.key(),
            headers={"type": getattr(message, "type", ""), "content-type": "application/json"},
        )

    async def publish_nowait(self, topic: Topic, message: Envelope) -> asyncio.Future[Any]:
        """Queue one envelope and return its ack future without waiting for it.

        Records of this producer keep their order per partition, so a caller can queue
        several messages, do other work, then await the futures where the ack matters.
        """
        message = _traced(message)
        future = await self.broker.publish(
            message.model_dump_json().encode(),
            self.topic_name(topic),
            key=message.key(),
            headers={"type": getattr(message, "type", ""), "content-type": "application/json"},
            no_confirm=True,
        )
        return future

    def consume(
        self,
        topic: Topic,
        group_id: str,
        handler: Handler,
        *,
        dedupe: bool = True,
        types: Collection[str] | None = None,
        linger_ms: int | None = None,
    ) -> None:
        """Register ``handler`` for decoded messages of ``topic`` in consumer group ``group_id``.

        With ``dedupe`` a message id already handled by this group is skipped (invariant 3).
        With ``types``, records whose ``type`` header names another type are acknowledged
        without being decoded (a record without the header is decoded as usual). With
        ``linger_ms``, as in :meth:`consume_batch`: fewer, fuller fetches for a consumer
        that may lag that long.
        """
        adapter: TypeAdapter[Any] = TypeAdapter(TOPIC_MODELS[topic])
        wanted = None if types is None else frozenset(types)
        commits = _Commits(group_id, self._settings.commit_interval_ms / 1000)
        self._commits.append(commits)

        pauses = _Redelivery(self._settings)

        async def on_record(delivery: Any) -> None:
            commits.arrived(delivery.consumer, delivery.record)
            try:
                await process(delivery.body, delivery.record)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                await pauses.hand_back(group_id, delivery.consumer, (delivery.record,), exc)
                return
            pauses.reset()
            await commits.handled(delivery.consumer, [delivery.record])

        async def process(body: bytes, record: Any) -> None:
            if not _wanted(wanted, record):
                return
            try:
                decoded = read_json(adapter, body)
            except (ValidationError, UnsupportedSchemaVersion) as exc:
                await self._dead_letter(topic, group_id, record, body, exc, _refusal(exc))
                return
            refused = self._refused(topic, decoded)
            if refused is not None:
                await self._dead_letter(topic, group_id, record, body, refused, REFUSED)
                return
            if dedupe and await self._seen(group_id, decoded.id):
                log.info("duplicate_skipped", topic=topic.value, id=decoded.id)
                return
            await self._handle(topic, group_id, record, body, decoded, handler)
            if dedupe:
                await self._mark(group_id, decoded.id)

        min_bytes, max_wait_ms = _fetch_linger(linger_ms)
        self.broker.subscriber(
            self.topic_name(topic),
            group_id=self._settings.topic_prefix + group_id,
            ack_policy=AckPolicy.MANUAL,  # _Commits commits handled records
            auto_offset_reset="earliest",
            decoder=_delivery,
            fetch_min_bytes=min_bytes,
            fetch_max_wait_ms=max_wait_ms,
        )(on_record)

    def broadcast(
        self,
        topic: Topic,
        handler: Handler,
        *,
        types: Collection[str] | None = None,
        linger_ms: int | None = None,
    ) -> None:
        """Register ``handler`` for every message of ``topic`` in *this process*.

        For state each process keeps for itself (caches, per-session workspaces): outside
        any consumer group, the process reads every partition from the latest offset on
        (a fresh process holds nothing older) and commits nothing, so restarts leave no
        abandoned groups on the broker. ``types`` and ``linger_ms`` as in :meth:`consume`.
        Undecodable records are skipped, not dead-lettered (a group consumer of the topic
        owns that); a failing handler is logged and the next record flows.
        """
        adapter: TypeAdapter[Any] = TypeAdapter(TOPIC_MODELS[topic])
        wanted = None if types is None else frozenset(types)

        async def on_record(delivery: Any) -> None:
            if not _wanted(wanted, delivery.record):
                return
            try:
                decoded = read_json(adapter, delivery.body)
            except (ValidationError, UnsupportedSchemaVersion):
                return
            refused = self._refused(topic, decoded)
            if refused is not None:  # a group consumer of the topic dead-letters it
                log.warning("record_refused", topic=topic.value, id=decoded.id, reason=str(refused))
                return
            try:
                with tracing.consuming(topic.value, decoded):
                    await handler(decoded)
            except Exception:
                log.exception("broadcast_handler_failed", topic=topic.value, id=decoded.id)

        min_bytes, max_wait_ms = _fetch_linger(linger_ms)
        self.broker.subscriber(
            self.topic_name(topic),
            group_id=None,
            auto_offset_reset="latest",
            ack_policy=AckPolicy.ACK_FIRST,  # nothing to commit without a group
            decoder=_delivery,
            fetch_min_bytes=min_bytes,
            fetch_max_wait_ms=max_wait_ms,
        )(on_record)

    async def flush_commits(self) -> None:
        """Commit every consumer's handled records now (before the broker stops)."""
        for commits in self._commits:
            await commits.close()

    def consume_batch(
        self,
        topic: Topic,
        group_id: str,
        handler: BatchHandler,
        *,
        max_records: int = 500,
        wait_ms: int = 100,
        types: Collection[str] | None = None,
        linger_ms: int | None = None,
        positions: bool = False,
    ) -> None:
        """Register ``handler`` for batches of decoded messages of ``topic``, in record order.

        One fetch from Kafka (up to ``max_records``; ``wait_ms`` is only waited when nothing
        is buffered) becomes one handler call with every decodable record, in partition
        order. Undecodable records are dead-lettered one by one with the reason, as
        :meth:`consume` does, once the handler has succeeded. The batch's offsets are
        committed after that, with the other handled records (``commit_interval_ms``). A
        handler that still fails after ``consumer_attempts``
        tries hands the whole batch back to Kafka (each partition rewound to its first
        record of the batch) to be delivered again, so nothing is committed that was not
        handled: the handler must be idempotent. There is no id-based dedupe here; batch
        handlers de-duplicate themselves (invariant 3). ``types`` filters on the ``type``
        header before decoding, as in :meth:`consume`. With ``linger_ms`` the broker holds
        each fetch up to that long until 64 KiB are there: fewer, larger batches (fewer
        handler calls and commits) for consumers that do not need low latency. With
        ``positions`` the handler gets :class:`Logged` records (message, partition, offset).
        """
        adapter: TypeAdapter[Any] = TypeAdapter(TOPIC_MODELS[topic])
        wanted = None if types is None else frozenset(types)
        commits = _Commits(group_id, self._settings.commit_interval_ms / 1000)
        self._commits.append(commits)

        pauses = _Redelivery(self._settings)

        async def on_batch(delivery: Any) -> None:
            records: tuple[Any, ...] = delivery.record
            if records:
                commits.arrived(delivery.consumer, records[0])
            try:
                handled = await process(delivery.body, records)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a dead letter that could not be written
                await pauses.hand_back(group_id, delivery.consumer, records, exc)
                return
            if not handled:
                _rewind(delivery.consumer, records)  # delivered again, nothing committed
                return
            pauses.reset()
            await commits.handled(delivery.consumer, records)

        async def process(bodies: list[bytes], records: tuple[Any, ...]) -> bool:
            decoded: list[Any] = []
            set_aside: list[tuple[Any, bytes, Exception, str]] = []
            for record, body in zip(records, bodies, strict=True):
                if not _wanted(wanted, record):
                    continue
                try:
                    message = read_json(adapter, body)
                except (ValidationError, UnsupportedSchemaVersion) as unreadable:
                    set_aside.append((record, body, unreadable, _refusal(unreadable)))
                    continue
                refused = self._refused(topic, message)
                if refused is not None:
                    set_aside.append((record, body, refused, REFUSED))
                    continue
                decoded.append(Logged(message, record.partition, record.offset) if positions
                               else message)  # fmt: skip
            if decoded and not await self._handle_batch(topic, decoded, handler):
                return False
            for record, body, reason, kind in set_aside:
                await self._dead_letter(topic, group_id, record, body, reason, kind)
            return True

        min_bytes, max_wait_ms = _fetch_linger(linger_ms)
        subscriber = self.broker.subscriber(
            self.topic_name(topic),
            batch=True,
            max_records=max_records,
            batch_timeout_ms=wait_ms,
            fetch_min_bytes=min_bytes,
            fetch_max_wait_ms=max_wait_ms,
            group_id=self._settings.topic_prefix + group_id,
            ack_policy=AckPolicy.MANUAL,  # _Commits commits, _rewind hands a batch back
            auto_offset_reset="earliest",
            decoder=_delivery,
        )
        _prompt(subscriber)
        subscriber(on_batch)

    def _refused(self, topic: Topic, message: Envelope) -> Exception | None:
        """Why ``message``'s credential does not vouch for it (None: accepted)."""
        return None if self._records is None else self._records.refusal(topic, message)

    async def _handle_batch(self, topic: Topic, decoded: list[Any], handler: BatchHandler) -> bool:
        """Whether the handler succeeded within ``consumer_attempts`` tries."""
        envelopes = [d.event if isinstance(d, Logged) else d for d in decoded]
        with tracing.consuming_batch(topic.value, envelopes):
            failure = await self._attempt(
                lambda: handler(decoded),
                "batch_handler_failed",
                topic=topic.value,
                size=len(decoded),
                first_id=decoded[0].id,
            )
        return failure is None

    async def _handle(
        self,
        topic: Topic,
        group_id: str,
        record: Any,
        body: bytes,
        decoded: Any,
        handler: Handler,
    ) -> None:
        with tracing.consuming(topic.value, decoded):
            failure = await self._attempt(
                lambda: handler(decoded), "handler_failed", topic=topic.value, id=decoded.id
            )
        if failure is not None:
            await self._dead_letter(topic, group_id, record, body, failure, "handler_failed")

    async def _attempt(
        self, call: Callable[[], Awaitable[None]], event: str, **fields: Any
    ) -> Exception | None:
        """Run ``call`` up to ``consumer_attempts`` times with a growing pause in between;
        None when one try succeeded, else the last failure (each one is logged)."""
        attempts = self._settings.consumer_attempts
        for attempt in range(1, attempts + 1):
            try:
                await call()
                return None
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                last = attempt == attempts
                log.warning(event, **fields, attempt=attempt, error=repr(exc), exc_info=last)
                if last:
                    return exc
                await asyncio.sleep(self._settings.consumer_retry_backoff_s * attempt)
        raise AssertionError("consumer_attempts must be at least 1")

    async def _dead_letter(
        self,
        topic: Topic,
        group_id: str,
        record: Any,
        body: bytes,
        exc: BaseException,
        kind: str,
    ) -> None:
        ids = _best_effort_ids(body)
        letter = DeadLetter(
            tenant_id=ids.get("tenant_id") or "unknown",
            session_id=ids.get("session_id") or "unknown",
            request_id=ids.get("request_id") or "unknown",
            data=DeadLetterData(
                source_topic=topic.value,
                partition=getattr(record, "partition", None),
                offset=getattr(record, "offset", None),
                consumer_group=group_id,
                reason=f"{kind}: {_short(exc)}",
                error_type=type(exc).__name__,
                key=_decode_key(getattr(record, "key", None)),
                raw=body.decode("utf-8", errors="replace")[:100_000],
            ),
        )
        log.error("dead_lettered", topic=topic.value, reason=letter.data.reason)
        await self.publish(Topic.DLQ, letter)
        DEAD_LETTERS.labels(topic.value, kind).inc()  # kind: one of a few fixed codes

    def _dedupe_key(self, group_id: str, message_id: str) -> str:
        return f"weft:dedupe:{group_id}:{message_id}"

    async def _seen(self, group_id: str, message_id: str) -> bool:
        if self._redis is None:
            return False
        return bool(await self._redis.exists(self._dedupe_key(group_id, message_id)))

    async def _mark(self, group_id: str, message_id: str) -> None:
        if self._redis is not None:
            key = self._dedupe_key(group_id, message_id)
            await self._redis.set(key, 1, ex=self._settings.dedupe_ttl_s)


def _traced(message: Envelope) -> Envelope:
    """``message`` with the current span's ``traceparent`` when it has none (a copy; the
    envelope is immutable). Envelopes that already carry one (the engine's events carry
    their turn's) are published as they are."""
    if message.traceparent is not None:
        return message
    traceparent = tracing.current_traceparent()
    if traceparent is None:
        return message
    return message.model_copy(update={"traceparent": traceparent})


def _refusal(exc: ValidationError | UnsupportedSchemaVersion) -> str:
    """The dead letter's reason prefix for a record the bus could not read."""
    return (
        "unsupported_schema_version" if isinstance(exc, UnsupportedSchemaVersion) else "undecodable"
    )


def _fetch_linger(linger_ms: int | None) -> tuple[int, int]:
    """``fetch_min_bytes`` and ``fetch_max_wait_ms``: aiokafka's defaults (answer at the
    first byte, else after 500 ms), or with ``linger_ms`` (> 0) the broker holds each
    fetch that long until 64 KiB are there."""
    if not linger_ms:
        return 1, 500
    return LINGER_BYTES, linger_ms


def _rewind(consumer: Any, records: tuple[Any, ...]) -> None:
    """Seek each partition of a batch back to its first record: read again, uncommitted."""
    earliest: dict[TopicPartition, int] = {}
    for record in records:
        partition = TopicPartition(record.topic, record.partition)
        earliest[partition] = min(record.offset, earliest.get(partition, record.offset))
    for partition, offset in earliest.items():
        consumer.seek(partition, offset)


def _wanted(types: frozenset[str] | None, record: Any) -> bool:
    """False only for a record whose ``type`` header names a type outside ``types``."""
    if types is None:
        return True
    for name, value in record.headers or ():
        if name == "type":
            return bytes(value).decode("utf-8", errors="replace") in types
    return True


def _best_effort_ids(body: bytes) -> dict[str, str]:
    try:
        value = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return {}
    if not isinstance(value, dict):
        return {}
    return {k: str(value[k]) for k in ("tenant_id", "session_id", "request_id") if value.get(k)}


def _decode_key(key: bytes | None) -> str | None:
    return key.decode("utf-8", errors="replace") if key is not None else None


def _short(exc: BaseException) -> str:
    text = str(exc).replace("\n", " ")
    return text[:2000]
