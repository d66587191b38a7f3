"""Short handles the model sees instead of stored ids (SPEC T-07 short ids, E-22).

``c12`` names a chunk, ``d3`` a document, ``b1`` a knowledge base, ``w2`` a wiki page,
``i1`` a wiki issue. Handles are stable for a
session and shared by every worker (Redis), so ``read_document`` can resolve a ``c12``
that ``search_knowledge`` gave out on another worker, and the model never sees a real id.
"""

from __future__ import annotations

from typing import Protocol

from redis.asyncio import Redis

KINDS = {"chunk": "c", "document": "d", "knowledge_base": "b", "wiki_page": "w", "wiki_issue": "i"}

# KEYS[1] = the session's hash; ARGV = real id, kind, handle prefix, TTL in seconds.
_ALLOCATE = """
local handle = redis.call('HGET', KEYS[1], 'id:' .. ARGV[1])
if handle then return handle end
local number = redis.call('HINCRBY', KEYS[1], 'next:' .. ARGV[2], 1)
handle = ARGV[3] .. number
redis.call('HSET', KEYS[1], 'id:' .. ARGV[1], handle, 'alias:' .. handle, ARGV[1])
redis.call('EXPIRE', KEYS[1], ARGV[4])
return handle
"""


class AliasBook(Protocol):
    """Per-session alias <-> id mapping."""

    async def alias(self, tenant_id: str, session_id: str, kind: str, real_id: str) -> str:
        """The session's handle for ``real_id`` (created on first use)."""
        ...

    async def resolve(self, tenant_id: str, session_id: str, handle: str) -> str | None:
        """The id behind ``handle``, or None."""
        ...

    async def known(self, tenant_id: str, session_id: str, real_id: str) -> str | None:
        """The handle ``real_id`` already has in the session, or None (none given out:
        the model has not seen it; nothing is allocated)."""
        ...


class RedisAliasBook:
    """Aliases in one Redis hash per session, expiring with the session's activity."""

    def __init__(self, redis: Redis, *, ttl_s: int = 7 * 86_400):
        self._redis = redis
        self._ttl_s = ttl_s
        self._allocate = redis.register_script(_ALLOCATE)

    @staticmethod
    def _key(tenant_id: str, session_id: str) -> str:
        return f"weft:aliases:{tenant_id}:{session_id}"

    async def alias(self, tenant_id: str, session_id: str, kind: str, real_id: str) -> str:
        """Look up or allocate in one round trip (a script runs atomically in Redis, so
        concurrent workers agree on one handle). A search gives out up to 20 handles, and
        up to five round trips each were most of a keyword search's time."""
        key = self._key(tenant_id, session_id)
        handle = await self._allocate(keys=[key], args=[real_id, kind, KINDS[kind], self._ttl_s])
        return handle.decode() if isinstance(handle, bytes) else str(handle)

    async def resolve(self, tenant_id: str, session_id: str, handle: str) -> str | None:
        """The id, or None for an unknown handle."""
        raw = await self._redis.hget(self._key(tenant_id, session_id), f"alias:{handle}")
        return raw.decode() if isinstance(raw, bytes) else raw

    async def known(self, tenant_id: str, session_id: str, real_id: str) -> str | None:
        """The handle of ``real_id``, or None (nothing allocated)."""
        raw = await self._redis.hget(self._key(tenant_id, session_id), f"id:{real_id}")
        return raw.decode() if isinstance(raw, bytes) else raw


class MemoryAliasBook:
    """In-process aliases (unit tests)."""

    def __init__(self) -> None:
        self._ids: dict[tuple[str, str, str], str] = {}
        self._aliases: dict[tuple[str, str, str], str] = {}
        self._next: dict[tuple[str, str, str], int] = {}

    async def alias(self, tenant_id: str, session_id: str, kind: str, real_id: str) -> str:
        """Look up or allocate."""
        key = (tenant_id, session_id, real_id)
        if key not in self._ids:
            counter = (tenant_id, session_id, kind)
            self._next[counter] = self._next.get(counter, 0) + 1
            handle = f"{KINDS[kind]}{self._next[counter]}"
            self._ids[key] = handle
            self._aliases[(tenant_id, session_id, handle)] = real_id
        return self._ids[key]

    async def resolve(self, tenant_id: str, session_id: str, handle: str) -> str | None:
        """The id, or None."""
        return self._aliases.get((tenant_id, session_id, handle))

    async def known(self, tenant_id: str, session_id: str, real_id: str) -> str | None:
        """The handle of ``real_id``, or None."""
        return self._ids.get((tenant_id, session_id, real_id))
