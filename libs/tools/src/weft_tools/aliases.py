"""Short handles the model sees instead of stored ids (SPEC T-07 short ids, E-22).

``c12`` names a chunk, ``d3`` a document, ``b1`` a knowledge base. Handles are stable for a
session and shared by every worker (Redis), so ``read_document`` can resolve a ``c12``
that ``search_knowledge`` gave out on another worker, and the model never sees a real id.
"""

from __future__ import annotations

from typing import Protocol

from redis.asyncio import Redis

KINDS = {"chunk": "c", "document": "d", "knowledge_base": "b"}


class AliasBook(Protocol):
    """Per-session alias <-> id mapping."""

    async def alias(self, tenant_id: str, session_id: str, kind: str, real_id: str) -> str:
        """The session's handle for ``real_id`` (created on first use)."""
        ...

    async def resolve(self, tenant_id: str, session_id: str, handle: str) -> str | None:
        """The id behind ``handle``, or None."""
        ...


class RedisAliasBook:
    """Aliases in one Redis hash per session, expiring with the session's activity."""

    def __init__(self, redis: Redis, *, ttl_s: int = 7 * 86_400):
        self._redis = redis
        self._ttl_s = ttl_s

    @staticmethod
    def _key(tenant_id: str, session_id: str) -> str:
        return f"weft:aliases:{tenant_id}:{session_id}"

    async def alias(self, tenant_id: str, session_id: str, kind: str, real_id: str) -> str:
        """Look up or allocate (HSETNX makes concurrent workers agree on one handle)."""
        key = self._key(tenant_id, session_id)
        existing = await self._redis.hget(key, f"id:{real_id}")
        if existing is not None:
            return existing.decode() if isinstance(existing, bytes) else str(existing)
        number = await self._redis.hincrby(key, f"next:{kind}", 1)
        handle = f"{KINDS[kind]}{number}"
        if not await self._redis.hsetnx(key, f"id:{real_id}", handle):
            won = await self._redis.hget(key, f"id:{real_id}")
            return won.decode() if isinstance(won, bytes) else str(won)
        await self._redis.hset(key, f"alias:{handle}", real_id)
        await self._redis.expire(key, self._ttl_s)
        return handle

    async def resolve(self, tenant_id: str, session_id: str, handle: str) -> str | None:
        """The id, or None for an unknown handle."""
        raw = await self._redis.hget(self._key(tenant_id, session_id), f"alias:{handle}")
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
