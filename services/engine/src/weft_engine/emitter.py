"""EventEmitter: agent events with a per-turn ``seq`` shared by every replica (invariant 1)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from redis.asyncio import Redis
from weft_contracts import CompleteData, CompleteEvent, Envelope, Topic
from weft_platform.bus import EventBus

from weft_engine.keys import completed_key, seq_key, streaming_key
from weft_engine.state import TurnStateLost

# Reserve ARGV[1] seqs on the turn's counter, which must exist (the opening save of
# TurnIntake.start creates it): a missing counter means Redis lost the turn, and counting
# again from 1 would hand clients seqs they already have. -1 then.
_NEXT_SEQS = """
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
return redis.call('INCRBY', KEYS[1], ARGV[1])
"""

# Count on from ARGV[1], the turn's last seq in Kafka, when the counter is past it; the
# number of seqs given back (-1: no counter).
_RECOUNT = """
local current = tonumber(redis.call('GET', KEYS[1]) or '-1')
if current < 0 then return -1 end
local published = tonumber(ARGV[1])
if current <= published then return 0 end
redis.call('SET', KEYS[1], published, 'KEEPTTL')
return current - published
"""


class EventEmitter:
    """Publishes a turn's events to ``agent.events`` in ``seq`` order.

    ``seq`` comes from a Redis counter per turn, so a turn continued by another replica
    keeps counting. ``complete`` is guarded by a once-only flag (SPEC E-04).
    """

    def __init__(self, bus: EventBus, redis: Redis, ttl_s: int):
        self._bus = bus
        self._redis = redis
        self._ttl = ttl_s
        self._streaming: set[str] = set()
        self._next_seqs = redis.register_script(_NEXT_SEQS)
        self._recount = redis.register_script(_RECOUNT)
        self._unacked: dict[str, list[asyncio.Future[Any]]] = {}

    async def emit(
        self,
        event_type: Callable[..., Envelope],
        ids: dict[str, Any],
        data: Any,
        *,
        wait: bool = True,
        opens: bool = False,
    ) -> None:
        """Publish one event of ``event_type`` for the turn named by ``ids``.

        With ``wait=False`` the event is only queued (in order with the turn's other
        events); :meth:`flush` waits for its ack. The hot path of a round queues its
        events so that Kafka acks overlap with the next step instead of adding up.
        ``opens``: the event may be the turn's first (a request refused before it
        started); otherwise the turn's counter must exist (:class:`TurnStateLost`).
        """
        rid = ids["request_id"]
        seq = (await self._reserve(rid, 1, opens=opens)).start
        event = event_type(**ids, seq=seq, data=data)
        if wait:
            await self._bus.publish(Topic.AGENT_EVENTS, event)
        else:
            future = await self._bus.publish_nowait(Topic.AGENT_EVENTS, event)
            self._unacked.setdefault(rid, []).append(future)

    async def emit_many(
        self, ids: dict[str, Any], events: list[tuple[Callable[..., Envelope], Any]]
    ) -> None:
        """Queue several events of one turn, in order, with one ``seq`` round trip; they
        are queued without suspending in between, so they leave in one produce request
        (with whatever the caller queues right after). :meth:`flush` waits for the acks."""
        if not events:
            return
        seqs = await self._reserve(ids["request_id"], len(events))
        await self.queue_reserved(ids, events, seqs)

    async def _reserve(self, request_id: str, count: int, *, opens: bool = False) -> range:
        key = seq_key(request_id)
        if opens:
            last = int(await self._redis.incrby(key, count))
            if last == count:
                await self._redis.expire(key, self._ttl)
        else:
            last = int(await self._next_seqs(keys=[key], args=[count]))
            if last < 0:
                raise TurnStateLost(request_id)
        return range(last - count + 1, last + 1)

    async def recount(self, request_id: str, published: int) -> int:
        """Count on from ``published``, the turn's last ``seq`` in Kafka: seqs a stopped
        replica reserved but never published are handed out again, so clients see no gap.
        Only when nobody else can be reserving the turn's seqs (a takeover's step holds
        the lease, and no tool result can be recorded). The number of seqs given back."""
        return int(await self._recount(keys=[seq_key(request_id)], args=[published]))

    async def queue_reserved(
        self,
        ids: dict[str, Any],
        events: list[tuple[Callable[..., Envelope], Any]],
        seqs: range,
    ) -> None:
        """Queue events whose ``seq`` were reserved already (``TurnStore.save_reserving``),
        without suspending in between; :meth:`flush` waits for the acks."""
        queued = self._unacked.setdefault(ids["request_id"], [])
        for seq, (event_type, data) in zip(seqs, events, strict=True):
            event = event_type(**ids, seq=seq, data=data)
            queued.append(await self._bus.publish_nowait(Topic.AGENT_EVENTS, event))

    async def flush(self, request_id: str) -> None:
        """Wait until every event queued for the turn is acknowledged (raises if one failed)."""
        futures = self._unacked.pop(request_id, [])
        if futures:
            await asyncio.gather(*futures)

    def drop_unacked(self, request_id: str) -> None:
        """Forget the turn's queued events after a failed step (the producer still sends
        them; their outcome no longer matters to this step)."""
        for future in self._unacked.pop(request_id, []):
            future.add_done_callback(_retrieve)

    async def complete(self, ids: dict[str, Any], data: CompleteData) -> bool:
        """Publish the turn's ``complete`` unless it was already; True when this call did."""
        flag = completed_key(ids["request_id"])
        if not await self._redis.set(flag, 1, nx=True, ex=self._ttl):
            return False
        try:
            await self.emit(CompleteEvent, ids, data)
        except BaseException:
            # Not published: let the redelivered step try again.
            await self._redis.delete(flag)
            raise
        return True

    async def completed(self, request_id: str) -> bool:
        """Whether the turn already emitted its ``complete``."""
        return bool(await self._redis.exists(completed_key(request_id)))

    async def started_streaming(self, request_id: str, round_: int) -> None:
        """Remember that the text of ``round_`` is half-streamed: a takeover drops it and
        runs the round again (``TurnLoop._take_over``)."""
        self._streaming.add(request_id)
        await self._redis.set(streaming_key(request_id), round_, ex=self._ttl)

    async def stopped_streaming(self, request_id: str) -> None:
        """The streamed text is settled (in the saved state, or superseded). Costs a Redis
        round trip only when this replica set the flag: most rounds stream no visible
        text before their tool calls."""
        if request_id in self._streaming:
            await self._redis.delete(streaming_key(request_id))
            self._streaming.discard(request_id)

    async def clear_streaming(self, request_id: str) -> None:
        """Drop the flag whoever set it (the turn ends, or a takeover settled it)."""
        self._streaming.discard(request_id)
        await self._redis.delete(streaming_key(request_id))


def _retrieve(future: asyncio.Future[Any]) -> None:
    """Mark a dropped future's exception as seen, so asyncio does not warn about it."""
    if not future.cancelled():
        future.exception()
