"""How the Kubernetes sandbox backend reads an exec stream: ``WSClient.read_channel`` of an
empty channel reads further frames, up to the close, into the other channels; what it read
must still be handed over (a pulled workspace lost its last frames this way)."""

from __future__ import annotations

import json

import pytest
from weft_sandbox import k8s_backend
from weft_sandbox.k8s_backend import KubernetesBackend
from weft_sandbox.settings import SandboxSettings


class _ScriptedStream:
    """WSClient's channel semantics over a fixed list of frames: ``update`` takes one
    frame; ``read_channel`` of an empty channel takes every frame left, the close too."""

    def __init__(self, frames: list[tuple[int, bytes]]):
        self._frames = list(frames)
        self._channels: dict[int, bytes] = {}
        self._open = True

    def is_open(self) -> bool:
        return self._open

    def update(self, timeout: float = 0) -> None:
        if not self._frames:
            self._open = False
            return
        channel, data = self._frames.pop(0)
        self._channels[channel] = self._channels.get(channel, b"") + data

    def read_channel(self, channel: int, timeout: float = 0) -> bytes:
        if channel not in self._channels:
            while self._open:
                self.update()
        return self._channels.pop(channel, b"")

    def write_stdin(self, data: bytes) -> None:
        pass

    def close(self) -> None:
        self._open = False


def test_frames_read_while_looking_at_another_channel_are_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    status = json.dumps({"status": "Success"}).encode()
    frames = [(1, b"a" * 10), (1, b"b" * 10), (1, b"c" * 10), (3, status)]
    monkeypatch.setattr(k8s_backend, "stream", lambda *a, **k: _ScriptedStream(frames))
    backend = KubernetesBackend(SandboxSettings(sandbox_backend="kubernetes"), configuration=None)
    backend.namespace = "ns"
    seen: list[bytes] = []
    done = backend._exec("pod", "files", ["tar"], b"", seen.append, lambda _: None, timeout_s=5)
    assert b"".join(seen) == b"a" * 10 + b"b" * 10 + b"c" * 10
    assert (done.exit_code, done.stdout_total, done.timed_out) == (0, 30, False)
