"""``cancel_and_wait`` ends background tasks at shutdown without raising their errors."""

from __future__ import annotations

import asyncio

from weft_platform.tasks import cancel_and_wait


async def test_cancels_running_tasks_skips_none_and_swallows_their_errors() -> None:
    async def forever() -> None:
        await asyncio.Event().wait()

    async def failed() -> None:
        raise RuntimeError("boom")

    running, broken = asyncio.create_task(forever()), asyncio.create_task(failed())
    await asyncio.sleep(0)
    await cancel_and_wait([running, None, broken])
    assert running.cancelled()
    assert broken.done() and isinstance(broken.exception(), RuntimeError)
