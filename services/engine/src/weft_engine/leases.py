"""TurnLeases: which replica runs a turn's step right now, in Redis.

A replica holds a lease while it runs a step and renews it; when the replica dies the lease
expires and any other replica's reaper claims the turn (invariant 2). Turns waiting for
tools hold no lease; their earliest tool deadline is kept in a second sorted set so the
engine can time out a worker that never answers (SPEC E-17). Taking the lease to run a
step drops that deadline: from then on the lease guards the turn.

The write that ends a step's lease also records how far Kafka acknowledged the turn's
dispatched tool calls (``AckedDispatch``): a takeover re-sends, or reports as uncertain,
only the calls it cannot know were received (``ToolRound.recover``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis

from weft_engine.keys import acked_key, cancel_key, inbox_key, lease_key, version_key

_CLAIM = """
local owner = redis.call('GET', KEYS[1])
if owner and owner ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[4])
return 1
"""

# Take the lease to run a step: nothing when another replica holds it; else the lease, its
# expiry in the leases set, and the turn's tool deadline dropped (the lease guards the turn
# from now on). Shared by _CLAIM_STEP and the state write that records a round's last
# result (``TurnStore.save_claiming``).
TAKE_STEP_LEASE = """
local function take_step_lease(lease, leases, deadlines, owner, ttl_ms, expiry, member)
  local holder = redis.call('GET', lease)
  if holder and holder ~= owner then return false end
  redis.call('SET', lease, owner, 'PX', ttl_ms)
  redis.call('ZADD', leases, expiry, member)
  redis.call('ZREM', deadlines, member)
  return true
end
"""

# Claim to run a step (KEYS: lease, leases, deadlines, cancel flag, inbox, version): what
# the step needs to start is read in the same round trip. Nil when another replica holds
# the lease.
_CLAIM_STEP = (
    TAKE_STEP_LEASE
    + """
if not take_step_lease(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2], ARGV[3], ARGV[4]) then
  return false
end
return {redis.call('GET', KEYS[6]) or '0', redis.call('EXISTS', KEYS[4]),
        redis.call('LLEN', KEYS[5])}
"""
)

# Record the calls Kafka acknowledged (KEYS[3], optional: ARGV[3] value, ARGV[4] ttl),
# whoever holds the lease now: what Kafka acknowledged stays true.
_NOTE_ACKED = """
if KEYS[3] then redis.call('SET', KEYS[3], ARGV[3], 'EX', ARGV[4]) end
return 1
"""

# Give the turn up to the reapers: drop the lease if this replica holds it and list the
# turn as expired, so the next reaper round takes it over.
_GIVE_UP = (
    """
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
redis.call('ZADD', KEYS[2], 0, ARGV[2])
"""
    + _NOTE_ACKED
)

_RELEASE = (
    """
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
redis.call('ZREM', KEYS[2], ARGV[2])
"""
    + _NOTE_ACKED
)


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True)
class AckedDispatch:
    """Kafka acknowledged the calls of the first ``groups`` dispatch groups of ``round``
    (groups leave one after another, each once the one before answered)."""

    round: int
    groups: int

    def encode(self) -> str:
        return f"{self.round}:{self.groups}"

    @classmethod
    def decode(cls, raw: bytes | str | None) -> AckedDispatch | None:
        """The stored record, or None when no step of the turn recorded one."""
        if raw is None:
            return None
        text = raw.decode() if isinstance(raw, bytes) else raw
        round_, groups = text.split(":")
        return cls(int(round_), int(groups))


@dataclass(frozen=True)
class StepClaim:
    """What a replica reads when it takes a turn's lease to run a step."""

    version: int
    """Version of the stored turn state: a state held in memory at this version is current."""
    stopped: bool
    """The user stopped the turn."""
    steered: bool
    """Steer messages wait in the turn's inbox (SPEC E-13)."""


@dataclass(frozen=True)
class LeaseRequest:
    """Taking a turn's step lease inside another script (``TurnStore.save_claiming``):
    the keys and arguments of ``TAKE_STEP_LEASE``, then the cancel flag and steer inbox
    that the claim reads."""

    keys: list[str]
    """lease, leases, deadlines, cancel flag, inbox."""
    args: list[Any]
    """owner, ttl (ms), expiry (epoch ms), request id."""


@dataclass(frozen=True)
class DeadlineUpdate:
    """A change of a turn's tool deadline that ``TurnStore.save`` writes in the same round
    trip as the state (``at_ms`` None: the turn no longer waits for tools)."""

    key: str
    request_id: str
    at_ms: int | None


class TurnLeases:
    """Leases and tool deadlines of one deployment (namespaced by the topic prefix)."""

    def __init__(
        self,
        redis: Redis,
        *,
        owner: str,
        namespace: str,
        ttl_s: float,
        record_ttl_s: int = 6 * 3600,
    ):
        self._redis = redis
        self.owner = owner
        self._ttl_ms = int(ttl_s * 1000)
        self._record_ttl_s = record_ttl_s
        """How long an ``AckedDispatch`` record lives (the turn state's TTL; the
        ``Finisher`` deletes it with the state)."""
        self._acked: dict[str, AckedDispatch] = {}
        """What this replica's running steps saw Kafka acknowledge, written by the write
        that ends the step's lease (no round trip of its own)."""
        self._leases = f"weft:{namespace}leases"
        self._deadlines = f"weft:{namespace}deadlines"
        self._claim = redis.register_script(_CLAIM)
        self._claim_step = redis.register_script(_CLAIM_STEP)
        self._release = redis.register_script(_RELEASE)
        self._give_up = redis.register_script(_GIVE_UP)

    async def claim(self, request_id: str) -> bool:
        """Renew the lease (or take it) unless another live replica holds it."""
        expiry = _now_ms() + self._ttl_ms
        ok = await self._claim(
            keys=[lease_key(request_id), self._leases],
            args=[self.owner, self._ttl_ms, expiry, request_id],
        )
        return bool(ok)

    def lease_request(self, request_id: str) -> LeaseRequest:
        """What claiming the turn's step lease takes, for a script that does it alongside
        another write (the lease's expiry counts from now)."""
        keys = [
            lease_key(request_id), self._leases, self._deadlines,
            cancel_key(request_id), inbox_key(request_id),
        ]  # fmt: skip
        return LeaseRequest(keys, [self.owner, self._ttl_ms, _now_ms() + self._ttl_ms, request_id])

    async def claim_step(self, request_id: str) -> StepClaim | None:
        """Take the lease to run a step of the turn; None when another live replica holds it.

        One round trip also drops the turn's tool deadline (the lease guards the turn from
        now on: if this replica dies, the reaper takes the turn over) and reads the state's
        version, the stop flag and the steer inbox, so a step can start from a state its
        submitter already holds (a round's Redis round trips are most of its CPU).
        """
        claim = self.lease_request(request_id)
        read: Any = await self._claim_step(
            keys=[*claim.keys, version_key(request_id)], args=claim.args
        )
        if read is None:
            return None
        version, stopped, waiting = read
        return StepClaim(version=int(version), stopped=bool(stopped), steered=bool(waiting))

    def note_acked(self, request_id: str, acked: AckedDispatch) -> None:
        """Kafka acknowledged the turn's calls up to ``acked``: recorded when the step's
        lease is released, given up or handed over."""
        self._acked[request_id] = acked

    def _with_acked(self, request_id: str, keys: list[str], args: list[Any]) -> None:
        """Append the noted ``AckedDispatch`` of the turn, if any, to a script's keys and
        arguments (``_NOTE_ACKED``)."""
        acked = self._acked.pop(request_id, None)
        if acked is not None:
            keys.append(acked_key(request_id))
            args += [acked.encode(), self._record_ttl_s]

    async def release(self, request_id: str) -> None:
        """Give the lease up (the turn waits for tools, ended, or is handed over)."""
        keys, args = [lease_key(request_id), self._leases], [self.owner, request_id]
        self._with_acked(request_id, keys, args)
        await self._release(keys=keys, args=args)

    async def give_up(self, request_id: str) -> None:
        """After a crashed step: any replica's reaper takes the turn over at once (a
        lease another replica holds meanwhile is left alone)."""
        keys, args = [lease_key(request_id), self._leases], [self.owner, request_id]
        self._with_acked(request_id, keys, args)
        await self._give_up(keys=keys, args=args)

    async def hand_over(self, request_id: str) -> None:
        """Drop the lease but keep the turn listed as expired, for an immediate takeover."""
        acked = self._acked.pop(request_id, None)
        if acked is not None:
            await self._redis.set(acked_key(request_id), acked.encode(), ex=self._record_ttl_s)
        await self._redis.delete(lease_key(request_id))
        await self._redis.zadd(self._leases, {request_id: 0})

    async def expired(self) -> list[str]:
        """Turns whose holder stopped renewing: their replica is gone."""
        raw: Any = await self._redis.zrangebyscore(
            self._leases, "-inf", _now_ms(), start=0, num=100
        )
        return [r.decode() for r in raw]

    def deadline(self, request_id: str, deadline_s: float | None) -> DeadlineUpdate:
        """The update that wakes the turn at ``deadline_s`` (epoch seconds), or that clears
        its deadline (None), for ``TurnStore.save`` to apply with the state."""
        at_ms = None if deadline_s is None else int(deadline_s * 1000)
        return DeadlineUpdate(key=self._deadlines, request_id=request_id, at_ms=at_ms)

    async def set_deadline(self, request_id: str, deadline_s: float) -> None:
        """Wake the turn at ``deadline_s`` (epoch seconds) if its tools have not answered."""
        await self._redis.zadd(self._deadlines, {request_id: int(deadline_s * 1000)})

    async def clear_deadline(self, request_id: str) -> None:
        """The turn no longer waits for tools."""
        await self._redis.zrem(self._deadlines, request_id)

    async def due(self) -> list[str]:
        """Turns whose tool deadline has passed."""
        raw: Any = await self._redis.zrangebyscore(
            self._deadlines, "-inf", _now_ms(), start=0, num=100
        )
        return [r.decode() for r in raw]
