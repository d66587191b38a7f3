"""The test kit never gives two servers of one process the same port."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import pytest
from weft_testkit import stack


class _Offered:
    """A socket whose bind(0) gets the ports of ``offers`` in turn, as a kernel may."""

    offers: Iterator[int]

    def __init__(self, *_: Any) -> None:
        self._port = 0

    def __enter__(self) -> _Offered:
        return self

    def __exit__(self, *_: Any) -> None:
        return None

    def bind(self, _address: tuple[str, int]) -> None:
        self._port = next(self.offers)

    def getsockname(self) -> tuple[str, int]:
        return ("127.0.0.1", self._port)


def test_a_port_offered_again_is_not_handed_out_twice(monkeypatch: pytest.MonkeyPatch) -> None:
    _Offered.offers = iter([41001, 41001, 41002])
    monkeypatch.setattr(socket, "socket", _Offered)
    monkeypatch.setattr(stack, "_HANDED_OUT", set())
    assert [stack.free_port(), stack.free_port()] == [41001, 41002]
