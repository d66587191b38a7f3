"""The test stacks' fork server (weft_testkit.forkserver) starts a service the way
``Popen([python, "-m", module], env=..., start_new_session=True)`` would: the given
environment only, its own session, output in its log, and ``Popen``'s exit codes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from weft_testkit.forkserver import ForkedProcess, ForkServer
from weft_testkit.stack import free_port


def _serve_llm(server: ForkServer, log: Path, env: dict[str, str]) -> ForkedProcess:
    port = free_port()
    args = ["serve", "--host", "127.0.0.1", "--port", str(port)]
    process = server.spawn("weft_scripted_llm", args, env, log)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert process.poll() is None, log.read_text()
        try:
            if httpx.get(f"http://127.0.0.1:{port}/_requests", timeout=2).status_code == 200:
                return process
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    pytest.fail(f"the forked scripted LLM never answered: {log.read_text()}")


def test_a_forked_process_gets_its_env_argv_session_and_exit_code(tmp_path: Path) -> None:
    # Nothing preloaded: what is checked here is the fork itself (importing every service
    # took 20 s of CPU on the loaded CI machine; every stack's start tests that preload).
    server = ForkServer(tmp_path / "status", preload=())
    env = {"PATH": os.environ["PATH"], "WEFT_FORK_PROBE": "only-this"}
    try:
        probe = server.spawn("tests.fork_probe", ["3", "x"], env, tmp_path / "probe.log")
        assert probe.wait(timeout=60) == 3
        seen = json.loads((tmp_path / "probe.log").read_text())
        assert seen["env"] == env, "the child sees exactly the environment it was given"
        assert seen["argv"] == ["3", "x"]
        assert seen["sid"] == seen["pid"] == probe.pid, "not in a session of its own"
        # The signal dispositions a Python started with Popen has: above all SIGPIPE
        # ignored, or a write to a peer that died (a killed Redis) kills the service.
        started = subprocess.run(
            [sys.executable, "-m", "tests.fork_probe", "0"], capture_output=True, check=True
        )
        assert seen["signals"] == json.loads(started.stdout)["signals"]
    finally:
        server.close()


def test_a_forked_service_stops_and_dies_with_popens_exit_codes(tmp_path: Path) -> None:
    server = ForkServer(tmp_path / "status", preload=["weft_scripted_llm.__main__"])
    env = {"PATH": os.environ["PATH"]}
    try:
        first = _serve_llm(server, tmp_path / "a.log", env)
        assert os.readlink(f"/proc/{first.pid}/fd/1") == str(tmp_path / "a.log")
        assert os.readlink(f"/proc/{first.pid}/fd/0") == os.devnull
        first.send_signal(signal.SIGTERM)
        # uvicorn stops cleanly, then re-raises the signal: Popen reports -15 too.
        assert first.wait(timeout=60) == -signal.SIGTERM
        second = _serve_llm(server, tmp_path / "b.log", env)
        second.kill()
        assert second.wait(timeout=60) == -signal.SIGKILL
        broken = server.spawn(
            "weft_scripted_llm", ["serve", "--port", "x"], env, tmp_path / "c.log"
        )
        assert broken.wait(timeout=60) > 0, "a service that cannot start fails"
        assert (tmp_path / "c.log").read_text(), "and says why in its log"
    finally:
        server.close()
