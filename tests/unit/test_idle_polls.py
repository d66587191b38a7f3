"""An idle knowledge worker polls less and less (SPEC C-03's ingestion queue, T-18's wiki
jobs): work queued sends a ``NOTIFY`` that wakes it at once, so its own polls only find
what nobody announces (retries coming due, stale claims) and back off from
``ingestion_poll_s`` to ``ingestion_idle_poll_max_s`` while the queues stay empty. Work
found, or a wake-up, brings the wait back to the base."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from weft_knowledge.ingestion_loop import IngestionLoop
from weft_knowledge.settings import KnowledgeSettings
from weft_knowledge.wiki_generation import WikiGenerationLoop
from weft_storage.listen import ChannelWakeups, IdlePolls


async def test_the_wait_doubles_to_its_cap_and_work_resets_it() -> None:
    polls = IdlePolls(1.0, 15.0)
    assert [polls.next_wait() for _ in range(7)] == [1, 2, 4, 8, 15, 15, 15]
    await polls.after(busy=True)  # returns at once
    assert [polls.next_wait() for _ in range(2)] == [1, 2]
    assert IdlePolls(2.0, 0.5).next_wait() == 2.0  # a cap below the base is the base


def test_an_idle_worker_polls_a_few_times_a_minute_by_default() -> None:
    s = KnowledgeSettings()
    assert s.ingestion_poll_s == 1.0 and s.ingestion_idle_poll_max_s >= 10


class ScriptedWakeups:
    """Stands in for ``ChannelWakeups``: records each wait's timeout and answers whether a
    notification came, from ``notified`` (then False); stops the loop after ``waits``."""

    def __init__(self, notified: list[bool], waits: int):
        self.notified = list(notified)
        self.timeouts: list[float] = []
        self.waits = waits
        self.done = asyncio.Event()

    async def run(self) -> None:
        await asyncio.Event().wait()

    def waiter(self) -> ScriptedWakeups:
        return self

    async def wait(self, timeout_s: float) -> bool:
        self.timeouts.append(timeout_s)
        if len(self.timeouts) >= self.waits:
            self.done.set()
            await asyncio.Event().wait()
        await asyncio.sleep(0)
        return self.notified.pop(0) if self.notified else False


class ScriptedQueue:
    """``ingest_next``/``generate_next`` answering from ``busy`` (then False)."""

    def __init__(self, busy: list[bool]):
        self.busy = list(busy)

    async def next(self) -> bool:
        await asyncio.sleep(0)
        return self.busy.pop(0) if self.busy else False

    ingest_next = generate_next = next


async def test_the_ingestion_tasks_back_off_and_a_wake_up_resets_them() -> None:
    # Polls: empty, empty, empty (woken), empty, work, empty, empty.
    wakeups = ScriptedWakeups(notified=[False, False, True, False, False, False], waits=7)
    queue = ScriptedQueue(busy=[False, False, False, False, True, False, False])
    loop = IngestionLoop(
        cast(Any, queue), 1.0, idle_poll_max_s=4.0, wakeups=cast(Any, wakeups), concurrency=1
    )
    await loop.start()
    await asyncio.wait_for(wakeups.done.wait(), 5)
    await loop.stop()
    # 1, 2, 4 (notified: reset), 1, then work (reset): 1, 2, 4 (the cap)
    assert wakeups.timeouts == [1, 2, 4, 1, 1, 2, 4]


async def test_the_wiki_task_listens_to_the_same_channel() -> None:
    wakeups = ScriptedWakeups(notified=[False, True], waits=4)
    loop = WikiGenerationLoop(
        cast(Any, ScriptedQueue([])), 1.0, idle_poll_max_s=8.0, wakeups=cast(Any, wakeups)
    )
    await loop.start()
    await asyncio.wait_for(wakeups.done.wait(), 5)
    await loop.stop()
    assert wakeups.timeouts == [1, 2, 1, 2]


async def test_a_notification_wakes_every_poller_even_one_that_was_busy() -> None:
    """Each polling task has its own waiter: the wiki task seeing a notification first
    does not swallow it for an ingestion task that was busy when it came (with one event
    cleared by the first to wake, that task slept until its next poll, up to 15 s)."""
    channel = ChannelWakeups(cast(Any, None), "weft_ingestion")  # no database: notify by hand
    first, busy = channel.waiter(), channel.waiter()
    waiting = asyncio.create_task(first.wait(30))
    await asyncio.sleep(0)
    channel.notify()
    assert await asyncio.wait_for(waiting, 5) is True
    assert await busy.wait(0.01) is True, "the busy poller still sees the notification"
    assert await busy.wait(0.01) is False, "and sees it once"
    assert await first.wait(0.01) is False
