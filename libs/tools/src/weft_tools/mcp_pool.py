"""One MCP session per (turn, server) on this worker, reused by the turn's later calls
(SPEC T-19), closed at turn end (``cleanup``), after an idle timeout, or when it breaks.

The SDK's transports live in anyio task groups, which must be entered and left by the
same task; a turn's calls run in different tasks. So each session has an owner task
that opens it, holds it while calls use it, and closes it when told to (or when idle):
the pool owns every such task and awaits them when it closes a session.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

import anyio
import httpx
from mcp import ClientSession
from weft_contracts.mcp import McpConnection
from weft_mcp_client.session import McpUnavailable, MessageTooLarge, mcp_session
from weft_mcp_client.transport import McpHttpClientFactory

T = TypeVar("T")

PoolKey = tuple[str, str]
"""(request_id, server_id)."""


@dataclass(frozen=True)
class TurnKey:
    """The turn a session belongs to."""

    session_id: str
    request_id: str


class _Held:
    """A session and the task holding it open."""

    def __init__(self, turn: TurnKey, idle_s: float):
        self.turn = turn
        self.idle_s = idle_s
        self.session: ClientSession | None = None
        self.error: BaseException | None = None
        self.ready = asyncio.Event()
        self.closing = asyncio.Event()
        self.broken = asyncio.Event()
        """A response was cut off: the server went away (set with ``closing``)."""
        self.cause: httpx.TransportError | None = None
        """Why the response was cut off."""
        self.last_used = time.monotonic()
        self.busy = 0
        self.task: asyncio.Task[None] | None = None

    @property
    def alive(self) -> bool:
        return self.session is not None and self.task is not None and not self.task.done()

    async def hold(
        self, conn: McpConnection, factory: McpHttpClientFactory, timeout_s: float
    ) -> None:
        try:
            async with mcp_session(
                conn, factory=factory, timeout_s=timeout_s, on_broken=self._break
            ) as session:
                self.session = session
                self.ready.set()
                await self._until_closed_or_idle()
        except Exception as exc:  # reported to the caller waiting on ``ready``
            self.error = exc
        finally:
            self.session = None
            self.ready.set()

    def _break(self, cause: httpx.TransportError) -> None:
        self.cause = cause
        self.broken.set()
        self.closing.set()

    async def use(self, use: Callable[[ClientSession], Awaitable[T]]) -> T:
        """``use`` on the session, given up when the session breaks: the SDK would let a
        call whose response was cut off wait for its timeout."""
        assert self.session is not None
        call = asyncio.ensure_future(use(self.session))
        broken = asyncio.ensure_future(self.broken.wait())
        try:
            await asyncio.wait({call, broken}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            broken.cancel()
            if not call.done():
                call.cancel()
            await asyncio.gather(call, broken, return_exceptions=True)
        if call.cancelled():
            if isinstance(self.cause, MessageTooLarge):  # it answered: asking again won't help
                raise McpUnavailable(str(self.cause))
            raise anyio.ClosedResourceError("the MCP server went away during the call")
        return call.result()

    async def _until_closed_or_idle(self) -> None:
        while not self.closing.is_set():
            left = self.last_used + self.idle_s - time.monotonic()
            if left <= 0 and self.busy == 0:
                return
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(left, 0.05)):
                    await self.closing.wait()


class McpSessionPool:
    """Sessions by (request_id, server_id); see the module docstring."""

    def __init__(self, factory: McpHttpClientFactory, *, idle_s: float = 120.0):
        self._factory = factory
        self._idle_s = idle_s
        self._held: dict[PoolKey, _Held] = {}
        self._lock = asyncio.Lock()

    def open_sessions(self) -> int:
        """Sessions held open now (for ``/internal/state`` and tests)."""
        return sum(1 for held in self._held.values() if held.alive)

    async def _session(
        self,
        key: PoolKey,
        turn: TurnKey,
        conn: Callable[[], Awaitable[McpConnection]],
        timeout_s: float,
    ) -> _Held:
        stale: list[_Held] = []
        async with self._lock:
            for old_key, old in list(self._held.items()):  # broken or idle-closed ones
                if old.ready.is_set() and not old.alive:
                    stale.append(self._held.pop(old_key))
            held = self._held.get(key)
            opener = held is None
            if held is None:
                held = self._held[key] = _Held(turn, self._idle_s)
        for old in stale:
            await self._stop(old)
        if opener:
            await self._open(key, held, conn, timeout_s)
        await held.ready.wait()
        if held.error is not None or held.session is None:
            if self._held.get(key) is held:
                self._held.pop(key)
            await self._stop(held)
            raise held.error or McpUnavailable("the MCP session closed")
        return held

    async def _open(
        self,
        key: PoolKey,
        held: _Held,
        conn: Callable[[], Awaitable[McpConnection]],
        timeout_s: float,
    ) -> None:
        try:
            connection = await conn()
        except BaseException as exc:
            held.error = exc
            held.ready.set()
            raise
        held.task = asyncio.create_task(
            held.hold(connection, self._factory, timeout_s), name=f"mcp-session-{key[1]}"
        )

    async def run(
        self,
        turn: TurnKey,
        server_id: str,
        conn: Callable[[], Awaitable[McpConnection]],
        use: Callable[[ClientSession], Awaitable[T]],
        *,
        timeout_s: float,
    ) -> T:
        """``use`` on the turn's session with ``server_id``, opened with ``conn()`` when
        there is none or the last one broke or idled out. Raises what opening raises
        (McpAuthorizationNeeded, McpUnavailable, the directory's errors) and what ``use``
        raises; a caller that sees the session break calls :meth:`drop`."""
        held = await self._session((turn.request_id, server_id), turn, conn, timeout_s)
        held.busy += 1
        try:
            return await held.use(use)
        finally:
            held.busy -= 1
            held.last_used = time.monotonic()

    async def drop(self, turn: TurnKey, server_id: str) -> BaseException | None:
        """Close the turn's session with ``server_id`` (it broke mid-call); returns what
        broke it, as its owner saw it (McpAuthorizationNeeded: the token was refused)."""
        held = self._held.pop((turn.request_id, server_id), None)
        if held is None:
            return None
        await self._stop(held)
        return held.error

    async def _close(self, key: PoolKey) -> None:
        held = self._held.pop(key, None)
        if held is not None:
            await self._stop(held)

    @staticmethod
    async def _stop(held: _Held) -> None:
        held.closing.set()
        if held.task is not None:
            await asyncio.gather(held.task, return_exceptions=True)

    async def cleanup(self, session_id: str, request_id: str) -> None:
        """Close the turn's sessions (SPEC T-04)."""
        keys = [k for k, held in self._held.items() if held.turn.request_id == request_id]
        for key in keys:
            await self._close(key)

    async def close(self) -> None:
        """Close every session (process shutdown)."""
        for key in list(self._held):
            await self._close(key)
