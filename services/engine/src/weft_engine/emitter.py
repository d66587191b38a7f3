"""EventEmitter: agent events with a per-turn ``seq`` shared by every replica (invariant 1)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import structlog
from pydantic import TypeAdapter
from redis.asyncio import Redis
from weft_contracts import AgentEvent, CompleteData, CompleteEvent, Envelope, Topic
from weft_platform.bus import EventBus

from weft_engine.keys import completed_key, outbox_holder_key, outbox_key, seq_key, streaming_key
from weft_engine.outbox import (
    BUSY,
    HOLD_MS,
    LET_GO,
    ORPHANED,
    OUTBOX_GUARD,
    SETTLE,
    TAKE_ORPHANS,
    OutboxWrite,
    SeqsHeld,
    entries_by_seq,
)
from weft_engine.state import TurnStateLost

log = structlog.get_logger(__name__)

# Reserve ARGV[1] seqs on the turn's counter, which must exist (the opening save of
# TurnIntake.start creates it): a missing counter means Redis lost the turn, and counting
# again from 1 would hand clients seqs they already have. -1 then. Only past every
# published seq: BUSY or ORPHANED while earlier ones wait in the outbox (KEYS[2], KEYS[3];
# ARGV[2] this emitter).
_NEXT_SEQS = (
    OUTBOX_GUARD
    + """
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
local held = outbox_guard(KEYS[2], KEYS[3], ARGV[2])
if held ~= 0 then return held end
return redis.call('INCRBY', KEYS[1], ARGV[1])
"""
)

# The turn's ``complete`` (KEYS[4] its once-only flag; ARGV[3] ttl, ARGV[4] its envelope):
# 0 when the flag is set already; else as _NEXT_SEQS for one seq, and in the same script
# the flag set and the event stored in the outbox at its seq, held by ARGV[2] ms.
_RESERVE_COMPLETE = (
    OUTBOX_GUARD
    + """
if redis.call('EXISTS', KEYS[4]) == 1 then return 0 end
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
local held = outbox_guard(KEYS[2], KEYS[3], ARGV[1])
if held ~= 0 then return held end
local seq = redis.call('INCR', KEYS[1])
redis.call('SET', KEYS[4], 1, 'EX', ARGV[3])
redis.call('HSET', KEYS[2], tostring(seq), ARGV[4])
redis.call('EXPIRE', KEYS[2], ARGV[3])
redis.call('SET', KEYS[3], ARGV[1], 'PX', ARGV[2])
return seq
"""
)

# Publishing the complete at seq ARGV[2] failed (KEYS: box, holder, flag; ARGV[1] me):
# take it out of the outbox and the flag down, and let go of the turn.
_UNRESERVE_COMPLETE = """
redis.call('HDEL', KEYS[1], ARGV[2])
redis.call('DEL', KEYS[3])
if redis.call('GET', KEYS[2]) == ARGV[1] then redis.call('DEL', KEYS[2]) end
return 1
"""

DRAIN_WAIT_S = 3 * HOLD_MS / 1000
"""How long :meth:`EventEmitter.drain` waits for a live holder to let go of a turn."""
_HELD_POLL_S = 0.05

_AGENT_EVENT: TypeAdapter[Any] = TypeAdapter(AgentEvent)

# Count on from ARGV[1], the turn's last seq in Kafka, when the counter is past it; the
# number of seqs given back (-1: no counter). Never below a seq still in the turn's
# outbox (KEYS[2]): its event is reserved and will be published. With ARGV[2] (a catch-up
# hold, KEYS[3] the holder): only while it still holds the turn (else -2, nothing given
# back: a seq may have been reserved since the read), and it lets go.
_RECOUNT = """
if ARGV[2] ~= '' then
  if redis.call('GET', KEYS[3]) ~= ARGV[2] then return -2 end
  redis.call('DEL', KEYS[3])
end
local current = tonumber(redis.call('GET', KEYS[1]) or '-1')
if current < 0 then return -1 end
local published = tonumber(ARGV[1])
for _, seq in ipairs(redis.call('HKEYS', KEYS[2])) do
  published = math.max(published, tonumber(seq))
end
if current <= published then return 0 end
redis.call('SET', KEYS[1], published, 'KEEPTTL')
return current - published
"""

# Hold the turn for a catch-up (KEYS: box, holder; ARGV: the catch-up's id, hold ms): 0,
# or BUSY / ORPHANED as OUTBOX_GUARD (its own emitter's hold counts as another's: a
# result recorded on this replica must not reserve a seq while the trail is read).
_HOLD = (
    OUTBOX_GUARD
    + """
local held = outbox_guard(KEYS[1], KEYS[2], ARGV[1])
if held ~= 0 then return held end
redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[2])
return 0
"""
)

# Keep holding (KEYS[1] holder; ARGV: id, hold ms) while the hold is still ours.
_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 1
"""


class EventEmitter:
    """Publishes a turn's events to ``agent.events`` in ``seq`` order.

    ``seq`` comes from a Redis counter per turn, so a turn continued by another replica
    keeps counting. ``complete`` is guarded by a once-only flag (SPEC E-04).
    """

    def __init__(self, bus: EventBus, redis: Redis, ttl_s: int, *, hold_ms: int = HOLD_MS):
        self._bus = bus
        self._redis = redis
        self._ttl = ttl_s
        self.holder = uuid.uuid4().hex
        """Who this emitter is in a turn's outbox (``outbox``)."""
        self._hold_ms = hold_ms
        self._streaming: set[str] = set()
        self._next_seqs = redis.register_script(_NEXT_SEQS)
        self._recount = redis.register_script(_RECOUNT)
        self._take_orphans = redis.register_script(TAKE_ORPHANS)
        self._settle = redis.register_script(SETTLE)
        self._let_go = redis.register_script(LET_GO)
        self._hold = redis.register_script(_HOLD)
        self._renew = redis.register_script(_RENEW)
        self._reserve_complete = redis.register_script(_RESERVE_COMPLETE)
        self._unreserve_complete = redis.register_script(_UNRESERVE_COMPLETE)
        self._unacked: dict[str, list[asyncio.Future[Any]]] = {}
        self._outboxed: dict[str, list[int]] = {}
        """Seqs of the turn's queued events that wait in its outbox for their ack."""
        self._letting_go: set[asyncio.Task[Any]] = set()

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
            return range(last - count + 1, last + 1)
        keys = [key, outbox_key(request_id), outbox_holder_key(request_id)]
        while (last := int(await self._next_seqs(keys=keys, args=[count, self.holder]))) in (
            BUSY,
            ORPHANED,
        ):
            await self.drain(request_id)  # earlier seqs go out first
        if last < 0:
            raise TurnStateLost(request_id)
        return range(last - count + 1, last + 1)

    def stage(
        self, ids: dict[str, Any], events: list[tuple[Callable[..., Envelope], Any]]
    ) -> tuple[list[Envelope], OutboxWrite]:
        """The turn's events as envelopes before their seqs are known (seq 0; the id they
        keep), and the outbox write that stores them with the reservation
        (``TurnStore.save_reserving``); :meth:`queue_outboxed` queues them once reserved."""
        envelopes = [event_type(**ids, data=data) for event_type, data in events]
        entries = [e.model_dump_json() for e in envelopes]
        return envelopes, OutboxWrite(self.holder, entries, self._hold_ms)

    async def queue_outboxed(self, envelopes: list[Envelope], seqs: range) -> None:
        """Queue :meth:`stage`'s envelopes at their reserved seqs; :meth:`flush` waits for
        the acks and then takes them out of the outbox."""
        if not envelopes:
            return
        rid = envelopes[0].request_id
        queued = self._unacked.setdefault(rid, [])
        for seq, envelope in zip(seqs, envelopes, strict=True):
            event = envelope.model_copy(update={"seq": seq})
            queued.append(await self._bus.publish_nowait(Topic.AGENT_EVENTS, event))
        self._outboxed.setdefault(rid, []).extend(seqs)

    async def drain(self, request_id: str) -> int:
        """Publish what a dead holder left in the turn's outbox, at its seqs and in seq
        order, and wait for the acks; first wait (up to ``DRAIN_WAIT_S``) for a live
        holder to let go. The number of events published: 0 when there were none, or
        when they are this emitter's own (queued already). :class:`SeqsHeld` when a
        holder keeps the turn past the wait."""
        keys = [outbox_key(request_id), outbox_holder_key(request_id)]
        give_up = time.monotonic() + DRAIN_WAIT_S
        while (
            flat := await self._take_orphans(keys=keys, args=[self.holder, self._hold_ms])
        ) is None:
            if time.monotonic() > give_up:
                raise SeqsHeld(request_id, BUSY)
            await asyncio.sleep(_HELD_POLL_S)
        orphans = entries_by_seq(flat)
        if not orphans:
            return 0
        try:
            futures = [
                await self._bus.publish_nowait(
                    Topic.AGENT_EVENTS,
                    _AGENT_EVENT.validate_json(raw).model_copy(update={"seq": seq}),
                )
                for seq, raw in orphans
            ]
            await asyncio.gather(*futures)
        except Exception:
            await self._let_go(keys=keys, args=[self.holder])
            raise
        await self._settle(keys=keys, args=[self.holder, *(seq for seq, _ in orphans)])
        log.info("outbox_drained", request_id=request_id, seqs=[seq for seq, _ in orphans])
        return len(orphans)

    async def recount(self, request_id: str, published: int) -> int:
        """Count on from ``published``, the turn's last ``seq`` in Kafka: seqs a stopped
        replica reserved but never published are handed out again, so clients see no gap.
        Only when nobody else can be reserving the turn's seqs (see :meth:`catch_up`).
        The number of seqs given back."""
        keys = [seq_key(request_id), outbox_key(request_id), outbox_holder_key(request_id)]
        return int(await self._recount(keys=keys, args=[published, ""]))

    async def catch_up(
        self, request_id: str, last_published: Callable[[], Awaitable[int | None]]
    ) -> int | None:
        """Count the turn's events on from ``last_published()`` (the last seq Kafka holds,
        None when unknown): what a dead holder left in the outbox goes out first, then
        the turn is held while the trail is read, so that no replica reserves a seq
        meanwhile (a result recorder waits, ``drain``): every seq reserved before the
        hold is in Kafka or in the outbox, or was reserved by the stopped replica and
        never published. The number of seqs given back; None when none could be (no
        trail, or the hold ran out)."""
        keys = [outbox_key(request_id), outbox_holder_key(request_id)]
        me = f"{self.holder}:catch-up"
        give_up = time.monotonic() + DRAIN_WAIT_S
        while (held := int(await self._hold(keys=keys, args=[me, self._hold_ms]))) != 0:
            # A live holder is waited for, a dead one's entries go out; this replica's
            # own entries (a result its consumer records) are acked within moments.
            if await self.drain(request_id) == 0 and held == BUSY:
                if time.monotonic() > give_up:
                    raise SeqsHeld(request_id, BUSY)
                await asyncio.sleep(_HELD_POLL_S)
        renewing = asyncio.create_task(self._keep_holding(keys[1], me))
        try:
            published = await last_published()
        finally:
            renewing.cancel()
        if published is None:
            await self._let_go(keys=keys, args=[me])
            return None
        given_back = int(
            await self._recount(keys=[seq_key(request_id), *keys], args=[published, me])
        )
        return None if given_back == -2 else given_back

    async def _keep_holding(self, holder_key: str, me: str) -> None:
        while True:
            await asyncio.sleep(self._hold_ms / 3000)
            await self._renew(keys=[holder_key], args=[me, self._hold_ms])

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
        """Wait until every event queued for the turn is acknowledged (raises if one
        failed); the acked ones are then taken out of the turn's outbox."""
        futures = self._unacked.pop(request_id, [])
        outboxed = self._outboxed.pop(request_id, [])
        keys = [outbox_key(request_id), outbox_holder_key(request_id)]
        try:
            if futures:
                await asyncio.gather(*futures)
        except Exception:
            if outboxed:  # whoever reserves a seq next publishes them, without waiting
                await self._let_go(keys=keys, args=[self.holder])
            raise
        if outboxed:
            await self._settle(keys=keys, args=[self.holder, *outboxed])

    def drop_unacked(self, request_id: str) -> None:
        """Forget the turn's queued events after a failed step (the producer still sends
        them; their outcome no longer matters to this step). The turn's outbox is let go
        of: the next reservation publishes its entries again (the same envelopes), as it
        cannot know whether they were acked."""
        if self._outboxed.pop(request_id, None):
            keys = [outbox_key(request_id), outbox_holder_key(request_id)]
            task = asyncio.create_task(self._let_go(keys=keys, args=[self.holder]))
            self._letting_go.add(task)
            task.add_done_callback(self._letting_go.discard)
        for future in self._unacked.pop(request_id, []):
            future.add_done_callback(_retrieve)

    async def complete(self, ids: dict[str, Any], data: CompleteData) -> bool:
        """Publish the turn's ``complete`` unless it was already; True when this call did.

        The once-only flag, the event's seq and the event itself (in the turn's outbox)
        are written by one script: a replica killed before the ack leaves the event to the
        takeover, which sees the flag and publishes it (``drain``) instead of ending the
        turn without one."""
        rid = ids["request_id"]
        envelope = CompleteEvent(**ids, data=data)
        keys = [seq_key(rid), outbox_key(rid), outbox_holder_key(rid), completed_key(rid)]
        args: list[str | int] = [self.holder, self._hold_ms, self._ttl, envelope.model_dump_json()]
        while (seq := int(await self._reserve_complete(keys=keys, args=args))) in (
            BUSY,
            ORPHANED,
        ):
            await self.drain(rid)  # earlier seqs go out first
        if seq == 0:
            return False
        if seq < 0:
            raise TurnStateLost(rid)
        try:
            await self._bus.publish(Topic.AGENT_EVENTS, envelope.model_copy(update={"seq": seq}))
        except BaseException:
            # Not published: let the redelivered step try again (it reserves a new seq).
            await self._unreserve_complete(keys=keys[1:], args=[self.holder, seq])
            raise
        await self._settle(keys=keys[1:3], args=[self.holder, seq])
        return True

    async def completed(self, request_id: str) -> bool:
        """Whether the turn already emitted its ``complete``."""
        return bool(await self._redis.exists(completed_key(request_id)))

    async def started_streaming(self, request_id: str, round_: int) -> None:
        """Remember that the text of ``round_`` is half-streamed: a takeover drops it and
        runs the round again (``TurnLoop._take_over``)."""
        self._streaming.add(request_id)
        await self._redis.set(streaming_key(request_id), round_, ex=self._ttl)

    async def streaming_round(self, request_id: str) -> int | None:
        """The round whose text is half-streamed, whichever replica streamed it (None: no
        round's text is)."""
        value = await self._redis.get(streaming_key(request_id))
        return None if value is None else int(value)

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
