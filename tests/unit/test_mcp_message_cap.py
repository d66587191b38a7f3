"""The per-message byte cap on an MCP server's responses (weft_mcp_client.session):
counted from the last server-sent-event boundary, wherever chunks split it."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
from weft_mcp_client.session import MessageTooLarge, _WatchedStream


class _Chunks(httpx.AsyncByteStream):
    def __init__(self, chunks: list[bytes]):
        self._chunks = chunks

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self._chunks:
            yield chunk


async def _read(chunks: list[bytes], cap: int) -> tuple[bytes, bool]:
    broken: list[bool] = []
    stream = _WatchedStream(_Chunks(chunks), lambda _: broken.append(True), cap)
    out = b""
    async for chunk in stream:
        out += chunk
    return out, bool(broken)


async def test_many_small_events_on_one_stream_pass_however_long_the_stream() -> None:
    event = b"data: " + b"x" * 90 + b"\n\n"
    out, broken = await _read([event] * 1000, cap=200)
    assert len(out) == 1000 * len(event) and not broken


async def test_a_boundary_split_across_chunks_still_ends_the_message() -> None:
    half = b"data: " + b"y" * 150 + b"\r\n"
    out, _ = await _read([half, b"\r\n" + half, b"\r\n"], cap=200)
    assert out.count(b"y") == 300


@pytest.mark.parametrize(
    "chunks",
    [
        [b"{" + b'"a": 1, ' * 100],  # one JSON body, no boundary
        [b"data: " + b"z" * 120, b"z" * 120 + b"\n\n"],  # one event over two chunks
        [b"data: ok\n\n", b"data: " + b"z" * 250],  # a later event grows past the cap
    ],
)
async def test_a_message_past_the_cap_is_cut_off_and_reported(chunks: list[bytes]) -> None:
    with pytest.raises(MessageTooLarge, match="larger than 200 bytes"):
        await _read(chunks, cap=200)
