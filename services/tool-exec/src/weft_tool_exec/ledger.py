"""Which write calls have started, so a redelivered one is reported, never replayed.

Invariant 3: Kafka delivers a call at least once. A read-only tool may simply run again.
A write tool must not: the first attempt may have done its effect before its worker died.
Before a write call runs, the worker claims it in Redis (``SET NX``); a later delivery that
finds the claim without a published result answers "outcome unknown" instead of running.
"""

from __future__ import annotations

from enum import StrEnum

from redis.asyncio import Redis
from weft_contracts import ToolCallRequested


class Claim(StrEnum):
    """What a delivery of a call may do."""

    RUN = "run"
    """First delivery: run it."""
    UNKNOWN = "unknown"
    """Started before and never finished: report the outcome as unknown."""
    DONE = "done"
    """Its result is already published: nothing to do."""


class CallLedger:
    """Claims and completions of tool calls in Redis (keys expire after ``ttl_s``)."""

    def __init__(self, redis: Redis, prefix: str, *, ttl_s: int = 86_400):
        self._redis = redis
        self._prefix = prefix
        self._ttl_s = ttl_s

    def _key(self, call: ToolCallRequested) -> str:
        # The model names call ids, and nothing makes them unique beyond one response
        # (some providers count call_0, call_1, ... in every turn): the turn scopes them.
        return f"weft:{self._prefix}toolcall:{call.scoped_call_id()}"

    async def claim(self, call: ToolCallRequested, worker: str) -> Claim:
        """Claim ``call`` for ``worker``, or say why it must not run."""
        key = self._key(call)
        if await self._redis.set(key, f"running:{worker}", nx=True, ex=self._ttl_s):
            return Claim.RUN
        state = await self._redis.get(key)
        return Claim.DONE if state == b"done" else Claim.UNKNOWN

    async def finish(self, call: ToolCallRequested) -> None:
        """Record that the call's result is published."""
        await self._redis.set(self._key(call), "done", ex=self._ttl_s)
