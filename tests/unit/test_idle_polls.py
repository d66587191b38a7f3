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
from weft_storage.listen import IdleWait


def test_the_wait_doubles_to_its_cap_and_work_resets_it() -> None:
    idle = IdleWait(1.0, 15.0)
    assert [idle.next() for _ in range(7)] == [1, 2, 4, 8, 15, 15, 15]
    idle.reset()
    assert [idle.next() for _ in range(2)] == [1, 2]
    assert IdleWait(2.0, 0.5).next() == 2.0  # a cap below the base is the base


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
