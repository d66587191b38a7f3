"""Deleting a tenant's or a user's data everywhere, and proving it: PostgreSQL rows (each
owner purges its own tables on the gateway's request, ``weft_gateway.tenant_owners``) and
Redis keys (session streams and directory entries, active-turn marks, citation aliases,
web snapshots, rate and turn-limit counters, the engine's and memory's per-turn keys).

Redis first, then PostgreSQL, then Redis once more: the session and turn ids that name
per-turn keys are asked of memory before its rows go, and the last pass removes what an
event in flight (the projector writing a stream) put back meanwhile. memory is purged
last, and only when every other owner was: its ``sessions`` tell the others which rows
are a user's, and the gateway which keys are a tenant's, so they must outlive any
owner's failure. Every step is idempotent, so a purge interrupted anywhere, or one that
could not reach an owner (reported, never reported done), is simply run again.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import structlog
from pydantic import BaseModel, Field
from redis.asyncio import Redis
from weft_storage.tenant_data import Scope

from weft_gateway.tenant_owners import MEMORY, MemoryOwner, Owner, OwnerUnreachable

log = structlog.get_logger(__name__)

TENANT_KEY_FAMILIES = (
    "stream",
    "gw:session",
    "session",
    "aliases",
    "web_snapshot",
    "rate",
    "tenant",
    "budget",
)
"""Redis keys ``weft:{family}:{tenant}:...``: everything of a tenant that Redis names by
tenant id. A feature adding such a key family adds it here."""

PREFIXED_TENANT_KEYS = ("sandboxbytes",)
"""Keys ``weft:{prefix}{name}:{tenant}`` (nothing after the tenant): the sandbox's ledger of
the bytes each replica holds of the tenant's live workspaces (``weft_sandbox.workspace_budget``;
a replica writes its part again while it still holds a purged workspace, and withdraws it
when its reaper drops that workspace, within one reaper interval)."""

PREFIXED_KEY_FAMILIES = ("toolcall", "sandboxcall")
"""Keys ``weft:{prefix}{family}:{tenant}:...`` of the services that share a deployment's
topic prefix (``WEFT_TOPIC_PREFIX``): the write-call claims of tool-exec
(``weft_tool_exec.ledger``) and of the sandbox (``weft_sandbox.worker``), keyed by
``ToolCallRequested.scoped_call_id``."""

TURN_KEY_SUFFIXES = (
    "state", "version", "seq", "cancel", "inbox", "lease", "images", "streaming",
    "completed", "takeovers", "acked", "audit", "outbox", "outbox:holder",
)  # fmt: skip
"""The engine's per-turn keys ``weft:turn:{request_id}:{suffix}`` (weft_engine.keys)."""

_GLOB = str.maketrans({c: f"\\{c}" for c in "*?[]\\"})


class OwnerResult(BaseModel):
    """One owner's part: rows it deleted, rows of the scope it still has, or why it could
    not be asked (then its residue is unknown and the purge is not done)."""

    deleted: dict[str, int] = Field(default_factory=dict)
    residue: dict[str, int] = Field(default_factory=dict)
    error: str | None = None


class PurgeReport(BaseModel):
    """What a purge deleted and what is left (``left`` all zero and no owner's ``error``:
    nothing remains)."""

    deleted_rows: dict[str, int]
    deleted_keys: int
    left_rows: dict[str, int]
    left_keys: dict[str, int]
    owners: dict[str, OwnerResult] = Field(default_factory=dict)

    @property
    def clean(self) -> bool:
        """Nothing of the scope is left, as every owner said."""
        return (
            not any(self.left_rows.values())
            and not any(self.left_keys.values())
            and not any(o.error for o in self.owners.values())
        )


class Residue(BaseModel):
    """What is left of a scope: rows per table, keys per Redis pattern, and each owner's
    answer (an owner that could not be asked makes it not clean)."""

    rows: dict[str, int]
    keys: dict[str, int]
    clean: bool
    owners: dict[str, OwnerResult] = Field(default_factory=dict)


def _session_keys(tenant_id: str, session_id: str) -> list[str]:
    """Every fixed-name key of one session: its stream and the stream's per-turn seq
    hash (gateway), directory entry (gateway), running, queued and last turn (engine),
    citation aliases (tools). Web snapshots are found by pattern."""
    stream = f"weft:stream:{tenant_id}:{session_id}"
    turn = f"weft:session:{tenant_id}:{session_id}"
    return [
        stream, f"{stream}:seq", f"weft:gw:session:{tenant_id}:{session_id}",
        f"{turn}:active", f"{turn}:queue", f"{turn}:last",
        f"weft:aliases:{tenant_id}:{session_id}",
    ]  # fmt: skip


def _turn_keys(request_id: str) -> list[str]:
    keys = [f"weft:turn:{request_id}:{suffix}" for suffix in TURN_KEY_SUFFIXES]
    return [*keys, f"weft:memory:answer:{request_id}", f"weft:memory:turn-ended:{request_id}"]


def tenant_patterns(tenant_id: str, prefix: str = "") -> list[str]:
    """SCAN patterns of every Redis key of the tenant (``prefix``: the deployment's topic
    prefix); none for an id holding ``:`` (older ids; a pattern could then match another
    tenant's keys), whose keys are found through its sessions and turns only."""
    if ":" in tenant_id:
        return []
    escaped = tenant_id.translate(_GLOB)
    exact = [f"weft:{prefix}{name}:{tenant_id}".translate(_GLOB) for name in PREFIXED_TENANT_KEYS]
    return (
        [f"weft:{family}:{escaped}:*" for family in TENANT_KEY_FAMILIES]
        + exact
        + [head.translate(_GLOB) + "*" for head in _claim_heads(tenant_id, prefix)]
    )


def _claim_heads(tenant_id: str, prefix: str) -> list[str]:
    """What the tenant's write-call claims begin with, one per family (the turn id and
    the call id follow)."""
    return [f"weft:{prefix}{family}:{tenant_id}:" for family in PREFIXED_KEY_FAMILIES]


def stream_pattern(tenant_id: str) -> str | None:
    """SCAN pattern of the tenant's session streams (None: see :func:`tenant_patterns`)."""
    patterns = tenant_patterns(tenant_id)
    return patterns[TENANT_KEY_FAMILIES.index("stream")] if patterns else None


def _session_patterns(tenant_id: str, sessions: Iterable[str]) -> list[str]:
    t = tenant_id.translate(_GLOB)
    return [f"weft:web_snapshot:{t}:{s.translate(_GLOB)}:*" for s in sessions]


class DataPurger:
    """Deletes and counts the data of a tenant or of one user, through its owners."""

    def __init__(
        self, memory: MemoryOwner, owners: Sequence[Owner], redis: Redis, *, prefix: str = ""
    ):
        self._memory = memory
        self._owners = [o for o in owners if o.name != MEMORY]
        """Every owner but memory, in the order they are purged (memory goes last)."""
        self._redis = redis
        self._prefix = prefix
        """The deployment's topic prefix, which the write-call claims' keys carry."""

    async def aclose(self) -> None:
        """Close the clients of the remote owners."""
        for owner in (self._memory, *self._owners):
            close = getattr(owner, "aclose", None)
            if close is not None:
                await close()

    async def purge(self, scope: Scope) -> PurgeReport:
        """Delete everything of ``scope``; the report says what is left (zero when done)."""
        errors: dict[str, str] = {}
        sids = await self._session_ids(scope, errors)
        # A user's turns, for their write-call claims (a tenant's go by pattern).
        rids = [] if scope.user_id is None else await self._request_ids(scope, sids, errors)
        deleted = await self._delete_session_keys(scope.tenant_id, sids, errors)
        deleted += await self._delete_scan(self._patterns(scope, sids))
        deleted += await self._claims(scope.tenant_id, rids, delete=True)
        named = Scope(scope.tenant_id, scope.user_id, tuple(sids))
        results = await self._purge_rows(named, sessions_known=MEMORY not in errors)
        for name, error in errors.items():
            results.setdefault(name, OwnerResult()).error = error
        deleted += await self._delete_session_keys(scope.tenant_id, sids, errors, turns=False)
        deleted += await self._delete_scan(self._patterns(scope, sids))
        deleted += await self._claims(scope.tenant_id, rids, delete=True)
        left = await self.residue(scope, sids, rids)
        for name, result in left.owners.items():
            ours = results.setdefault(name, OwnerResult())
            ours.residue = result.residue
            ours.error = ours.error or result.error
        rows: dict[str, int] = {}
        for result in results.values():
            rows.update({t: n for t, n in result.deleted.items() if n})
        return PurgeReport(
            deleted_rows=rows,
            deleted_keys=deleted,
            left_rows=left.rows,
            left_keys=left.keys,
            owners=results,
        )

    async def _purge_rows(self, scope: Scope, *, sessions_known: bool) -> dict[str, OwnerResult]:
        """Each owner purges its rows; memory last, and only once every other did with
        the scope's sessions known (``sessions_known``: memory listed them)."""
        results: dict[str, OwnerResult] = {}
        for owner in self._owners:
            results[owner.name] = await self._purge_one(owner, scope)
        failed = sorted(n for n, r in results.items() if r.error)
        if not sessions_known:
            failed.append("every owner (memory did not list the sessions)")
        if failed:
            results[MEMORY] = OwnerResult(
                error=f"not purged yet: the sessions index the data of {failed}"
            )
        else:
            results[MEMORY] = await self._purge_one(self._memory, scope)
        return results

    async def _purge_one(self, owner: Owner, scope: Scope) -> OwnerResult:
        try:
            answer = await owner.purge(scope)
        except OwnerUnreachable as exc:
            log.warning("tenant_purge_owner_failed", owner=owner.name, reason=exc.reason)
            return OwnerResult(error=exc.reason)
        return OwnerResult(deleted=answer.deleted, residue=answer.residue)

    async def residue(
        self, scope: Scope, sids: Sequence[str] = (), rids: Sequence[str] = ()
    ) -> Residue:
        """Rows and keys of ``scope`` still there: each owner's rows, the tenant's key
        families, and the keys of ``sids`` and ``rids`` (a user's sessions and turns,
        known only while memory has them or from a purge)."""
        errors: dict[str, str] = {}
        sids = list(sids) or await self._session_ids(scope, errors)
        owners: dict[str, OwnerResult] = {}
        rows: dict[str, int] = {}
        counted = Scope(scope.tenant_id, scope.user_id, tuple(sids))
        for owner in (*self._owners, self._memory):
            try:
                found = await owner.residue(counted)
            except OwnerUnreachable as exc:
                owners[owner.name] = OwnerResult(error=exc.reason)
                continue
            owners[owner.name] = OwnerResult(residue=found)
            rows.update(found)
        for name, error in errors.items():
            owners.setdefault(name, OwnerResult()).error = error
        keys: dict[str, int] = {}
        for pattern in self._patterns(scope, sids):
            keys[pattern] = await self._count_scan(pattern)
        exact = [k for s in sids for k in _session_keys(scope.tenant_id, s)]
        keys["session keys"] = 0
        for start in range(0, len(exact), 1000):
            keys["session keys"] += int(await self._redis.exists(*exact[start : start + 1000]))
        if scope.user_id is not None:
            keys["write-call claims"] = await self._claims(scope.tenant_id, rids)
        unreached = any(o.error for o in owners.values())
        clean = not any(rows.values()) and not any(keys.values()) and not unreached
        return Residue(rows=rows, keys=keys, clean=clean, owners=owners)

    async def _session_ids(self, scope: Scope, errors: dict[str, str]) -> list[str]:
        try:
            return await self._memory.session_ids(scope)
        except OwnerUnreachable as exc:
            errors[MEMORY] = exc.reason
            return []

    async def _request_ids(
        self, scope: Scope, sids: Sequence[str], errors: dict[str, str]
    ) -> list[str]:
        try:
            return await self._memory.request_ids(scope.tenant_id, sids)
        except OwnerUnreachable as exc:
            errors[MEMORY] = exc.reason
            return []

    def _patterns(self, scope: Scope, sids: Sequence[str]) -> list[str]:
        if scope.user_id is None:
            return tenant_patterns(scope.tenant_id, self._prefix)
        return _session_patterns(scope.tenant_id, sids)

    async def _delete_session_keys(
        self, tenant_id: str, sids: Sequence[str], errors: dict[str, str], *, turns: bool = True
    ) -> int:
        deleted = 0
        for start in range(0, len(sids), 500):
            chunk = sids[start : start + 500]
            keys = [k for s in chunk for k in _session_keys(tenant_id, s)]
            if turns:
                rids = await self._request_ids(Scope(tenant_id), chunk, errors)
                keys += [k for r in rids for k in _turn_keys(r)]
            for i in range(0, len(keys), 1000):
                deleted += int(await self._redis.delete(*keys[i : i + 1000]))
        return deleted

    async def _claims(self, tenant_id: str, rids: Sequence[str], *, delete: bool = False) -> int:
        """The write-call claims (``weft:<prefix>{family}:{tenant}:{request}:{call}``) of
        these turns: counted, or deleted. One SCAN per family, whatever the turn count."""
        if not rids or ":" in tenant_id:
            return 0
        wanted, found = {r.encode() for r in rids}, 0
        for head in _claim_heads(tenant_id, self._prefix):
            pattern, start = head.translate(_GLOB) + "*", len(head.encode())
            keys = [
                key
                async for key in self._redis.scan_iter(match=pattern, count=1000)
                if key[start:].split(b":", 1)[0] in wanted
            ]
            found += len(keys)
            if delete:
                for i in range(0, len(keys), 1000):
                    await self._redis.delete(*keys[i : i + 1000])
        return found

    async def _delete_scan(self, patterns: Sequence[str]) -> int:
        deleted = 0
        for pattern in patterns:
            batch: list[bytes] = []
            async for key in self._redis.scan_iter(match=pattern, count=1000):
                batch.append(key)
                if len(batch) >= 1000:
                    deleted += int(await self._redis.delete(*batch))
                    batch = []
            if batch:
                deleted += int(await self._redis.delete(*batch))
        return deleted

    async def _count_scan(self, pattern: str) -> int:
        return sum([1 async for _ in self._redis.scan_iter(match=pattern, count=1000)])
