"""A user stop must reach the model stream even when a chunk arrives at the same moment.

SPEC E-20 (cancel) and E-06 (stall timeout). Python 3.11's ``asyncio.wait_for`` returns the
inner result when the outer task is cancelled in the same loop iteration as the inner
await completes, losing the cancel; the stall timeout must not be built on it.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from weft_llm.openai_model import _with_stall_timeout


class _OneChunk:
    """A stream whose next chunk is whatever the test puts into ``ready``."""

    def __init__(self, ready: asyncio.Future[Any]):
        self._ready = ready

    def __aiter__(self) -> _OneChunk:
        return self

    async def __anext__(self) -> Any:
        return await self._ready


async def test_cancel_arriving_with_a_chunk_is_not_swallowed() -> None:
    ready: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

    async def consume() -> str:
        async for _chunk in _with_stall_timeout(_OneChunk(ready), 5.0):
            return "kept streaming after the stop"
        return "stream ended"

    task = asyncio.create_task(consume())
    await asyncio.sleep(0)  # the consumer now waits for the chunk
    ready.set_result({"choices": []})
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 2.0)


async def test_stall_timeout_still_fires() -> None:
    never: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    with pytest.raises(TimeoutError):
        async for _chunk in _with_stall_timeout(_OneChunk(never), 0.05):
            pass
