"""The test stack starts a process again on a new port when the port picked for it was
taken before it could bind (an outgoing connection took it from the ephemeral range)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from weft_testkit.stack import LocalStack, StackConfig, _Proc

TAKEN = "error while attempting to bind on address ('127.0.0.1', {port}): address already in use"


def _exited() -> subprocess.Popen[bytes]:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process


def _stack(tmp_path: Path, spawned: list[tuple[str, int]]) -> LocalStack:
    stack = LocalStack(StackConfig(log_dir=tmp_path))

    def spawn(name: str, port: int, args: list[str], env: dict[str, str] | None = None) -> None:
        spawned.append((name, port))
        stack._procs.append(_Proc(name, port, _exited(), args))

    stack._spawn = spawn  # type: ignore[method-assign]
    return stack


def _exited_with(stack: LocalStack, name: str, port: int, taken: int) -> _Proc:
    stack.log_path(name, port).write_text(f'{{"event": "{TAKEN.format(port=taken)}"}}\n')
    proc = _Proc(name, port, _exited(), ["worker"])
    stack._procs.append(proc)
    return proc


def test_a_worker_whose_port_was_taken_starts_again_on_another(tmp_path: Path) -> None:
    spawned: list[tuple[str, int]] = []
    stack = _stack(tmp_path, spawned)
    stack.ports["knowledge_worker"] = [41001]
    proc = _exited_with(stack, "knowledge_worker", 41001, taken=41001)
    again = stack._on_another_port(proc)
    assert again is not None and again.port != 41001 and again.args == ["worker"]
    assert stack.ports["knowledge_worker"] == [again.port] and spawned == [(again.name, again.port)]
    assert proc not in stack._procs


def test_a_taken_metrics_port_is_replaced_and_the_http_port_kept(tmp_path: Path) -> None:
    spawned: list[tuple[str, int]] = []
    stack = _stack(tmp_path, spawned)
    stack.ports["engine"] = [41002]
    stack.metrics_ports[41002] = 42002
    proc = _exited_with(stack, "engine", 41002, taken=42002)
    again = stack._on_another_port(proc)
    assert again is not None and again.port == 41002
    assert stack.metrics_ports[41002] != 42002


@pytest.mark.parametrize("log", ["a traceback, no port taken", None])
def test_any_other_exit_and_a_called_services_port_are_not_retried(
    tmp_path: Path, log: str | None
) -> None:
    """A peer names a service's HTTP port in its settings: moving it would strand them."""
    stack = _stack(tmp_path, [])
    stack.ports["memory"] = [41003]
    proc = _exited_with(stack, "memory", 41003, taken=41003)
    if log is not None:
        stack.log_path("memory", 41003).write_text(log)
    assert stack._on_another_port(proc) is None
