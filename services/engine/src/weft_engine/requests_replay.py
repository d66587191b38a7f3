"""After Redis lost its data, the requests that waited only in Redis start again from the log.

The engine keeps a request it took from ``agent.requests`` in Redis alone while it waits:
queued behind the session's running turn (double-texting ``enqueue``, ``interrupt``) or
as a pending start (``SessionGate``). Redis coming back empty loses them, but Kafka still
holds every request. When the ``TurnAuditor`` finds Redis emptied, one replica (a lock
that goes with the data it guards) reads back the last ``window_s`` of ``agent.requests``
and hands each request that left no trace to the intake again, in log order, as a
redelivery would: it starts, or queues behind the session's running turn.

No trace means: no event of it in ``agent.events`` (a turn that started, or a request that
was refused, has one; a lost turn is ended by the auditor instead) and no state or
``complete`` flag in Redis (handled again since the loss). A request the requests
consumer handles at the same time is harmless: a duplicate start loses the state write,
and a duplicate queued entry is skipped when its turn is opened (the ``complete`` flag).
Requests older than the window are not replayed; steer messages are not either (the
turns they were for lost their state and are ended).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import structlog
from pydantic import TypeAdapter, ValidationError
from redis.asyncio import Redis
from weft_contracts import ChatRequested, Topic, UnsupportedSchemaVersion
from weft_contracts.compat import read_json
from weft_contracts.topics import TOPIC_MODELS
from weft_platform.record_credentials import RecordCheck
from weft_platform.settings import KafkaAccess
from weft_platform.topic_window import read_window

from weft_engine.state import without_trace
from weft_engine.trails import TurnTrails

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class LoggedRequest:
    """A request as the log holds it, with the time Kafka stored it."""

    request: ChatRequested
    at: datetime

    @property
    def session_id(self) -> str:
        return self.request.session_id

    @property
    def request_id(self) -> str:
        return self.request.request_id

    @property
    def started_at(self) -> datetime:
        """Where its trail in ``agent.events`` can start (``TurnRef``)."""
        return self.at


RequestLog = Callable[[float], Awaitable[list[LoggedRequest]]]
"""The requests the log holds since an epoch time (seconds), in log order."""


def kafka_requests(access: KafkaAccess, topic: str, check: RecordCheck | None = None) -> RequestLog:
    """A :data:`RequestLog` over ``agent.requests`` (a standalone consumer, nothing
    committed). Records that are not chat requests, do not decode, or whose credential
    ``check`` refuses are skipped: the requests consumer dead-letters those."""
    adapter: TypeAdapter[Any] = TypeAdapter(TOPIC_MODELS[Topic.AGENT_REQUESTS])

    async def since(epoch_s: float) -> list[LoggedRequest]:
        found: list[LoggedRequest] = []

        async def keep(records: Sequence[Any]) -> None:
            for record in records:
                try:
                    message = read_json(adapter, record.value or b"")
                except (ValidationError, UnsupportedSchemaVersion):
                    continue
                if check is not None and check.refusal(Topic.AGENT_REQUESTS, message):
                    continue
                if isinstance(message, ChatRequested):
                    at = datetime.fromtimestamp(record.timestamp / 1000, UTC)
                    found.append(LoggedRequest(message, at))

        await read_window(access, topic, int(epoch_s * 1000), keep, limit_s=60)
        return found

    return since


class RequestsReplay:
    """Hands the requests that left no trace to the intake again (module docstring)."""

    def __init__(
        self,
        *,
        redis: Redis,
        requests: RequestLog,
        trails: TurnTrails,
        handle: Callable[[ChatRequested], Awaitable[None]],
        window_s: float,
        lock_key: str,
    ):
        self._redis = redis
        self._requests = requests
        self._trails = trails
        self._handle = handle
        self._window_s = window_s
        self._lock_key = lock_key

    async def __call__(self, now: float) -> list[str]:
        """Replay once per loss of Redis's data; the request ids handed over again."""
        if not await self._redis.set(self._lock_key, "1", nx=True, ex=int(self._window_s)):
            return []  # another replica replays (or did): the lock lives in the same Redis
        try:
            return await self._replay(now)
        except BaseException:
            await self._redis.delete(self._lock_key)  # the next sweep tries again
            raise

    async def _replay(self, now: float) -> list[str]:
        logged = await self._requests(now - self._window_s)
        if not logged:
            return []
        trails = await self._trails.read(logged)
        silent = [r for r in logged if trails.get(r.request_id) is None
                  or trails[r.request_id].last_seq == 0]  # fmt: skip
        untouched = await without_trace(self._redis, silent)
        replayed: list[str] = []
        for entry in untouched:
            await self._handle(entry.request)
            replayed.append(entry.request_id)
        if replayed:
            log.warning("requests_replayed", requests=replayed)
        return replayed
