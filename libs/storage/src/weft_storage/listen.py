"""Wake-ups from PostgreSQL ``NOTIFY``: an idle poller learns at once that there is work.

A wake-up is only a hint. Whoever waits on one still polls on its own interval, so a lost
connection or a notification sent while it reconnects costs latency, never work.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import structlog
from sqlalchemy.ext.asyncio import AsyncEngine

log = structlog.get_logger(__name__)

CHECK_S = 30.0
"""How often an idle listening connection is checked (a dead one is replaced)."""


class ChannelWakeups:
    """``LISTEN`` on ``channel`` over one connection of ``engine``; each notification sets
    :attr:`event`. :meth:`run` reconnects after ``retry_s`` when the connection is lost;
    :attr:`listening` is set while a connection listens."""

    def __init__(self, engine: AsyncEngine, channel: str, *, retry_s: float = 5.0):
        self._engine = engine
        self._channel = channel
        self._retry_s = retry_s
        self.event = asyncio.Event()
        self.listening = asyncio.Event()

    async def wait(self, timeout_s: float) -> None:
        """Until a notification or ``timeout_s``, whichever comes first; then re-arm."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.event.wait(), timeout_s)
        self.event.clear()

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
            self.event.set()

        async with self._engine.connect() as conn:
            raw = await conn.get_raw_connection()
            driver: Any = raw.driver_connection
            lost = asyncio.Event()
            driver.add_termination_listener(lambda _c: lost.set())
            await driver.add_listener(self._channel, wake)
            self.listening.set()
            self.event.set()  # whatever was queued while nobody listened
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
