"""Wake-ups from PostgreSQL ``NOTIFY``: an idle poller learns at once that there is work.

A wake-up is only a hint. Whoever waits on one still polls on its own interval, so a lost
connection or a notification sent while it reconnects costs latency, never work.
"""

from __future__ import annotations

import asyncio
from typing import Any

import structlog
from sqlalchemy.ext.asyncio import AsyncEngine

log = structlog.get_logger(__name__)

CHECK_S = 30.0
"""How often an idle listening connection is checked (a dead one is replaced)."""


class ChannelWakeups:
    """``LISTEN`` on ``channel`` over one connection of ``engine``; each notification
    counts in :attr:`notifications` and wakes every :class:`Waiter`. :meth:`run`
    reconnects after ``retry_s`` when the connection is lost; :attr:`listening` is set
    while a connection listens."""

    def __init__(self, engine: AsyncEngine, channel: str, *, retry_s: float = 5.0):
        self._engine = engine
        self._channel = channel
        self._retry_s = retry_s
        self.notifications = 0
        self._next = asyncio.Event()
        self.listening = asyncio.Event()

    def waiter(self) -> Waiter:
        """A poller's own view of the channel (one per polling task)."""
        return Waiter(self)

    def notify(self) -> None:
        """Count a notification and wake everyone waiting for the next one."""
        self.notifications += 1
        self._next.set()
        self._next = asyncio.Event()

    async def next_notification(self, timeout_s: float) -> None:
        """Until the next notification; TimeoutError after ``timeout_s``. (``asyncio.timeout``,
        not ``wait_for``: on Python 3.11 ``wait_for`` can swallow the cancel that stops the
        worker when it lands as a notification arrives.)"""
        async with asyncio.timeout(timeout_s):
            await self._next.wait()

    async def run(self) -> None:
        """Listen until cancelled."""
        while True:
            try:
                await self._listen()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # database away: the pollers' interval still holds
                log.warning("listen_lost", channel=self._channel, error=repr(exc))
            await asyncio.sleep(self._retry_s)

    async def _listen(self) -> None:
        def wake(*_: Any) -> None:
            self.notify()

        async with self._engine.connect() as conn:
            raw = await conn.get_raw_connection()
            driver: Any = raw.driver_connection
            lost = asyncio.Event()
            driver.add_termination_listener(lambda _c: lost.set())
            await driver.add_listener(self._channel, wake)
            self.listening.set()
            self.notify()  # whatever was queued while nobody listened
            try:
                while not lost.is_set():
                    try:
                        await asyncio.wait_for(lost.wait(), CHECK_S)
                    except TimeoutError:
                        await driver.execute("SELECT 1")  # raises on a dead connection
            finally:
                self.listening.clear()
                if not driver.is_closed():
                    await driver.remove_listener(self._channel, wake)


class Waiter:
    """One poller's wake-ups: :meth:`wait` returns at once when a notification came since
    this waiter's last return, however many other pollers saw it first. (One event
    cleared by whoever woke first let a poller that was busy at that moment sleep
    through the notification until its next poll.)"""

    def __init__(self, channel: ChannelWakeups):
        self._channel = channel
        self._seen = channel.notifications

    async def wait(self, timeout_s: float) -> bool:
        """Until a notification this waiter has not seen, or ``timeout_s``: True when one
        came (there may be work), False on the timeout."""
        if self._channel.notifications == self._seen:
            try:
                await self._channel.next_notification(timeout_s)
            except TimeoutError:
                return False
        self._seen = self._channel.notifications
        return True


class IdlePolls:
    """When an idle poller polls again: at once after a poll that found work; after an
    empty one, at the next notification on ``wakeups`` (its own :class:`Waiter`) or after
    a wait of ``base_s`` doubling with each empty poll up to ``max_s``, whichever comes
    first. Queuing work sends a ``NOTIFY``, so the wait only bounds what no notification
    announces (a retry coming due, a stale claim to take over, a tenant back under
    budget): an idle worker costs a few queries a minute, not several a second (it was
    about 4 % of a core per idle worker, and as much work on PostgreSQL's side)."""

    def __init__(self, base_s: float, max_s: float, wakeups: ChannelWakeups | None = None):
        self._base_s = base_s
        self._max_s = max(base_s, max_s)
        self._next_s = base_s
        self._waiter = wakeups.waiter() if wakeups is not None else None

    def next_wait(self) -> float:
        """The wait after an empty poll (the one after it is twice as long, capped)."""
        wait = self._next_s
        self._next_s = min(self._max_s, wait * 2)
        return wait

    async def after(self, busy: bool) -> None:
        """Return when the poller should poll again, ``busy``: its last poll found work."""
        if busy:
            self._next_s = self._base_s
            return
        wait = self.next_wait()
        if self._waiter is None:
            await asyncio.sleep(wait)
        elif await self._waiter.wait(wait):
            self._next_s = self._base_s
