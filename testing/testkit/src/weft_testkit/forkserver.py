"""Start service processes for tests by forking a process that has already imported them.

Each service process spends 2-4 s of CPU importing its libraries (FastAPI, SQLAlchemy,
Redis, FastStream, openai ...) before it does anything, and a test run starts over a
hundred of them: on the 2-core CI machine that import time was the largest share of the
suite's CPU. The fork server imports every service module once; each service process is
then forked from it, set up the way ``subprocess.Popen([python, "-m", module], env=...,
start_new_session=True, stdout=log)`` would set it up (its own session, the given
environment, output to the log, stdin from /dev/null), and runs the module as
``__main__``. It is a separate OS process with its own sockets and connections, like any
replica; only the interpreter's imported modules come from the fork. Two visible
differences: ``ps`` and ``/proc/<pid>/cmdline`` show the fork server's command line, and
``/proc/<pid>/environ`` the environment the server started with (the kernel's copy of the
first environment; the service itself and every process it starts see the one it was
given).

Services read their settings when they start, never at import time, so the environment
set in the child is what they see. ``make up``, compose and the chart start services
with ``python -m`` as before: this is a test harness facility only, turned off with
``WEFT_TESTKIT_FORK=0`` (``LocalStack`` then starts each service with ``Popen``).

Protocol (``SERVER``): one JSON request per line on the server's stdin, one JSON answer per line on
its stdout. The server reaps its children and writes each one's exit code (``Popen``'s
convention: negative for a signal) to ``<status_dir>/<pid>``.
"""

from __future__ import annotations

import importlib
import json
import os
import random
import runpy
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any, NoReturn

PRELOAD = (
    "weft_gateway.__main__",
    "weft_agent_config.__main__",
    "weft_engine.__main__",
    "weft_tool_exec.__main__",
    "weft_sandbox.__main__",
    "weft_memory.__main__",
    "weft_suggestions.__main__",
    "weft_knowledge.__main__",
    "weft_scripted_llm.__main__",
)


SERVER = "import sys; from weft_testkit.forkserver import main; main(sys.argv[1], sys.argv[2:])"
"""The server's command (``-c``: ``-m`` would import this module a second time)."""


def enabled() -> bool:
    """Whether test stacks fork their services (``WEFT_TESTKIT_FORK``, default on)."""
    return os.environ.get("WEFT_TESTKIT_FORK", "1") != "0"


class ForkedProcess:
    """A service process forked by the server, with the part of ``Popen``'s interface the
    test stacks use (``pid``, ``poll``, ``wait``, ``send_signal``, ``kill``)."""

    def __init__(self, pid: int, status_file: Path):
        self.pid = pid
        self.returncode: int | None = None
        self._status_file = status_file

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                text = self._status_file.read_text()
            except FileNotFoundError:
                return None
            if text.endswith("\n"):  # written whole
                self.returncode = int(text)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while (code := self.poll()) is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout or 0)
            time.sleep(0.02)
        return code

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:  # once reaped, the pid may belong to another process
            os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)


class ForkServer:
    """The client side: starts the server on first use, asks it for processes."""

    def __init__(self, status_dir: Path, preload: Sequence[str] = PRELOAD):
        """``preload``: the modules the server imports before it forks (every service's,
        by default; a test of the server itself names fewer and starts in a second)."""
        self.status_dir = status_dir
        self.preload = tuple(preload)
        self._server: subprocess.Popen[str] | None = None
        self._lock = threading.Lock()

    def _ensure(self) -> subprocess.Popen[str]:
        if self._server is None or self._server.poll() is not None:
            self.status_dir.mkdir(parents=True, exist_ok=True)
            self._server = subprocess.Popen(
                [sys.executable, "-u", "-c", SERVER, str(self.status_dir), *self.preload],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1,
            )  # fmt: skip
            ready = self._read()
            if ready.get("ready") is not True:
                raise RuntimeError(f"fork server did not start: {ready}")
        return self._server

    def _read(self) -> dict[str, Any]:
        assert self._server is not None and self._server.stdout is not None
        line = self._server.stdout.readline()
        if not line:
            raise RuntimeError("fork server exited")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def spawn(self, module: str, args: list[str], env: dict[str, str], log: Path) -> ForkedProcess:
        """Fork a process that runs ``python -m module *args`` with ``env``, its output
        appended to ``log``."""
        with self._lock:
            server = self._ensure()
            assert server.stdin is not None
            request = {"module": module, "args": args, "env": env, "log": str(log)}
            server.stdin.write(json.dumps(request) + "\n")
            answer = self._read()
        if "pid" not in answer:
            raise RuntimeError(f"fork server refused {module}: {answer}")
        pid = int(answer["pid"])
        return ForkedProcess(pid, self.status_dir / str(pid))

    def close(self) -> None:
        """Stop the server (its children are not touched: their stacks stop them)."""
        with self._lock:
            if self._server is not None and self._server.poll() is None:
                assert self._server.stdin is not None
                self._server.stdin.close()
                self._server.wait(timeout=30)
            self._server = None


# --- the server -------------------------------------------------------------------------


def _reap(status_dir: Path) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        tmp = status_dir / f".{pid}"
        tmp.write_text(f"{os.waitstatus_to_exitcode(status)}\n")
        tmp.replace(status_dir / str(pid))


def _child(request: dict[str, Any]) -> NoReturn:
    """In the forked child: become what ``Popen`` would have started, run the module,
    exit the way ``python -m`` does (``SystemExit`` out of the server's loop: atexit
    handlers and thread joins run as in any interpreter's exit)."""
    # Only the server's own handler goes: the rest is what every Python process starts
    # with (SIGPIPE and SIGXFSZ ignored, so a write to a dead peer raises instead of
    # killing the process; SIGINT raising KeyboardInterrupt).
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    os.setsid()
    log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.closerange(3, os.sysconf("SC_OPEN_MAX"))  # the server's pipes stay with the server
    os.environ.clear()
    os.environ.update(request["env"])
    random.seed()  # not the server's sequence, shared by every sibling
    sys.argv = [request["module"], *request["args"]]
    code = 0
    try:
        runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
    except BaseException:
        traceback.print_exc()
        code = 1
    raise SystemExit(code)


def serve(
    status_dir: Path, requests: IO[str], answers: IO[str], preload: Sequence[str] = PRELOAD
) -> None:
    """Preload the services, then fork one child per request until ``requests`` ends."""
    for module in preload:
        importlib.import_module(module)
    if threading.active_count() != 1:  # forking a threaded process copies held locks
        names = [t.name for t in threading.enumerate()]
        answers.write(json.dumps({"ready": False, "threads": names}) + "\n")
        return
    signal.signal(signal.SIGCHLD, lambda *_: _reap(status_dir))
    answers.write(json.dumps({"ready": True}) + "\n")
    for line in requests:
        if not line.strip():
            continue
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _child(request)
        answers.write(json.dumps({"pid": pid}) + "\n")


def main(status_dir: str, preload: Sequence[str]) -> None:
    """The server process: requests on stdin, answers on stdout."""
    serve(Path(status_dir), sys.stdin, sys.stdout, preload)
