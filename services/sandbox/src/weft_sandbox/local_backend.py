"""The local backend: each command in its own bubblewrap sandbox (SPEC S-01, S-05).

bubblewrap isolates (no network, only the session's workspace writable, its own PID
namespace and ``/proc``, no host files but ``/usr`` and a few of ``/etc``; its options,
which name host paths, come through a descriptor, so its argv in ``/proc`` names none); it
limits nothing. Limits:

- ``prlimit``: CPU seconds, address space, largest file, open files (per process);
- processes: a cgroup of its own per command (``pids.max``) when the service may create
  one, else RLIMIT_NPROC, which counts per uid: a per-sandbox uid when the service runs
  as root, so it never counts the service's own processes;
- time: on timeout every process of the command gets SIGTERM, then after a grace period
  the sandbox's monitor is SIGKILLed, which kills its whole PID namespace;
- output: stdout and stderr kept up to their caps, the rest drained and counted.

The command never runs as root: as root the service switches to the workspace's uid
(``setpriv``) before bubblewrap.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import secrets
import shutil
import signal
import time
from dataclasses import dataclass
from pathlib import Path

import structlog

from weft_sandbox.settings import SandboxSettings
from weft_sandbox.workspace import WORKSPACE, Workspace

log = structlog.get_logger(__name__)

TMP_BYTES = 64 * 1024 * 1024
"""The command's private /tmp (a tmpfs: counted in memory, so capped)."""

ETC_FILES = (
    "/etc/alternatives", "/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d",
    "/etc/ssl", "/etc/ca-certificates", "/etc/localtime", "/etc/mime.types",
)  # fmt: skip
"""What of the host's /etc a command sees (never passwd/shadow/the service's config)."""

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")


class BackendUnavailable(RuntimeError):
    """bubblewrap cannot run here (not installed, or no unprivileged user namespaces)."""


@dataclass(frozen=True, kw_only=True)
class CommandResult:
    """What a command did."""

    exit_code: int | None
    """None when it was killed on timeout."""
    stdout: bytes
    stderr: bytes
    stdout_total: int
    stderr_total: int
    timed_out: bool
    duration_ms: int


@dataclass(frozen=True, kw_only=True)
class Command:
    """One command to run in a workspace."""

    command: str
    work_dir: str = WORKSPACE
    """Already checked to lie inside the workspace."""
    stdin: bytes = b""
    env: dict[str, str] | None = None
    timeout_s: float
    stdout_cap: int
    stderr_cap: int
    read_only_mounts: tuple[tuple[str, str], ...] = ()
    """(host folder, sandbox path) pairs bound read-only, e.g. a skill's package."""


class LocalBackend:
    """Runs commands under bubblewrap with the settings' limits."""

    mounts_read_only = True

    def __init__(self, settings: SandboxSettings, instance_id: str):
        self._settings = settings
        self._cgroup_parent = Path(settings.sandbox_cgroup_root) / f"weft-sandbox-{instance_id}"
        self.pid_limit: str = "rlimit_nproc"

    def start(self) -> None:
        """Check bubblewrap runs (fail the start with a clear message where it cannot) and
        pick how processes are limited."""
        for tool in ("bwrap", "prlimit", "git"):
            if shutil.which(tool) is None:
                raise BackendUnavailable(
                    f"{tool} is not installed: the local sandbox backend needs bubblewrap, "
                    "util-linux (prlimit) and git (apt-get install bubblewrap)"
                )
        try:
            self._clear_cgroups()
            self._cgroup_parent.mkdir(exist_ok=True)
            has_pids = (self._cgroup_parent / "pids.max").exists()
        except OSError:
            has_pids = False
        self.pid_limit = "cgroup" if has_pids else "rlimit_nproc"
        log.info("sandbox_backend", backend="local", pid_limit=self.pid_limit)

    def stop(self) -> None:
        """Remove this replica's cgroups."""
        self._clear_cgroups()

    def _clear_cgroups(self) -> None:
        """Remove the cgroups a killed predecessor with this instance id left (a cgroup
        directory is removed with rmdir, its children first)."""
        if not self._cgroup_parent.is_dir():
            return
        for child in self._cgroup_parent.iterdir():
            if child.is_dir():
                self._release(child)
        with contextlib.suppress(OSError):
            self._cgroup_parent.rmdir()

    async def run(self, space: Workspace, command: Command) -> CommandResult:
        """Run ``command`` in ``space`` under every limit; never raises for what the
        command does, only when the sandbox itself cannot start."""
        cgroup = self._cgroup(space)
        started = time.monotonic()
        args_fd = _args_file(self._bwrap_options(space, command))
        try:
            proc = await asyncio.create_subprocess_exec(
                *self._argv(space, command, cgroup, args_fd),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                start_new_session=True,
                env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"},
                pass_fds=(args_fd,),
            )
        finally:
            os.close(args_fd)  # bubblewrap has its own copy (and closes it once read)
        assert proc.stdin and proc.stdout and proc.stderr
        readers = asyncio.gather(
            _capped(proc.stdout, command.stdout_cap), _capped(proc.stderr, command.stderr_cap)
        )
        feeder = asyncio.create_task(_feed(proc.stdin, command.stdin))
        timed_out = False
        try:
            try:
                async with asyncio.timeout(command.timeout_s):
                    await proc.wait()
            except TimeoutError:
                timed_out = True
                await self._kill(proc, cgroup)
            (out, out_total), (err, err_total) = await readers
        finally:
            feeder.cancel()
            if proc.returncode is None:  # cancelled: leave nothing running
                await self._kill(proc, cgroup)
            self._release(cgroup)
        return CommandResult(
            exit_code=None if timed_out else proc.returncode,
            stdout=out,
            stderr=err,
            stdout_total=out_total,
            stderr_total=err_total,
            timed_out=timed_out,
            duration_ms=int((time.monotonic() - started) * 1000),
        )

    def _argv(
        self, space: Workspace, command: Command, cgroup: Path | None, args_fd: int
    ) -> list[str]:
        s = self._settings
        limits = [
            f"--cpu={s.sandbox_cpu_seconds}",
            f"--as={s.sandbox_memory_bytes}",
            f"--fsize={s.sandbox_file_bytes}",
            f"--nofile={s.sandbox_nofile}",
            "--core=0",
        ]
        if cgroup is None:
            limits.append(f"--nproc={s.sandbox_pids}")
        argv = ["prlimit", *limits, "--"]
        if os.geteuid() == 0:
            argv += ["setpriv", f"--reuid={space.uid}", f"--regid={space.gid}", "--clear-groups",
                     "--inh-caps=-all", "--"]  # fmt: skip
        # Only the command itself on bubblewrap's command line: its options (the host
        # paths of the workspace and the mounts) come from ``args_fd``, so /proc/1/cmdline
        # inside the sandbox (bubblewrap is its pid 1) names no host path.
        argv += ["bwrap", "--args", str(args_fd), "--", "/bin/sh", "-c", command.command]
        if cgroup is not None:  # join the cgroup first, then become the command
            argv = ["sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', str(cgroup), *argv]
        return argv

    def _bwrap_options(self, space: Workspace, command: Command) -> list[str]:
        """bubblewrap's options, read from a file descriptor (``--args``)."""
        argv = ["--unshare-all", "--die-with-parent", "--new-session", "--clearenv"]
        if self._settings.sandbox_network:
            argv.append("--share-net")
        argv += ["--ro-bind", "/usr", "/usr"]
        for link in ("bin", "lib", "lib64", "sbin"):
            argv += ["--symlink", f"usr/{link}", f"/{link}"]
        for path in ETC_FILES:
            argv += ["--ro-bind-try", path, path]
        argv += ["--proc", "/proc", "--dev", "/dev", "--size", str(TMP_BYTES), "--tmpfs", "/tmp"]
        argv += ["--bind", str(space.work), WORKSPACE]
        argv += ["--ro-bind", str(space.work / "input"), f"{WORKSPACE}/input"]
        for host, inside in command.read_only_mounts:
            argv += ["--ro-bind", host, inside]
        argv += ["--chdir", command.work_dir]
        env = {"HOME": WORKSPACE, "PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8",
               "TMPDIR": "/tmp", **(command.env or {})}  # fmt: skip
        for name, value in env.items():
            argv += ["--setenv", name, value]
        return argv

    def _cgroup(self, space: Workspace) -> Path | None:
        if self.pid_limit != "cgroup":
            return None
        group = self._cgroup_parent / f"{space.home.name}-{secrets.token_hex(4)}"
        try:
            group.mkdir()
            (group / "pids.max").write_text(str(self._settings.sandbox_pids))
        except OSError:
            log.exception("sandbox_cgroup_failed", group=str(group))
            raise
        return group

    async def _kill(self, proc: asyncio.subprocess.Process, cgroup: Path | None) -> None:
        """SIGTERM every process of the command (not the bubblewrap monitor, whose death
        would SIGKILL them at once), then SIGKILL the monitor and its namespace."""
        for pid in _members(proc.pid, cgroup):
            if pid != proc.pid:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGTERM)
        try:
            async with asyncio.timeout(self._settings.sandbox_kill_grace_s):
                await _all_gone(proc.pid, cgroup)
        except TimeoutError:
            pass
        for pid in [proc.pid, *_members(proc.pid, cgroup)]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        await proc.wait()

    def _release(self, cgroup: Path | None) -> None:
        if cgroup is None:
            return
        for pid in _members(0, cgroup):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for _ in range(50):
            try:
                cgroup.rmdir()
                return
            except OSError:
                time.sleep(0.01)  # the kernel reaps the killed processes first
        log.warning("sandbox_cgroup_left", group=str(cgroup))


def _args_file(options: list[str]) -> int:
    """An anonymous in-memory file holding ``options`` NUL-separated, read from its start
    (written whole before the command starts: a pipe would block past its buffer)."""
    # Close-on-exec here; ``pass_fds`` hands it to bubblewrap alone, which closes it once
    # read, so the command never holds it (it could seek back and read the host paths).
    fd = os.memfd_create("weft-bwrap-args")
    try:
        data = memoryview(b"".join(os.fsencode(option) + b"\0" for option in options))
        while data:
            data = data[os.write(fd, data) :]
        os.lseek(fd, 0, os.SEEK_SET)
    except BaseException:
        os.close(fd)
        raise
    return fd


def check_env(env: dict[str, str]) -> str | None:
    """Why ``env`` cannot be passed to a command, or None."""
    for name, value in env.items():
        if not ENV_NAME.match(name):
            return f"env name {name[:64]!r} is not a valid variable name"
        if "\x00" in value:
            return f"env {name} contains a NUL byte"
    return None


async def _capped(stream: asyncio.StreamReader, cap: int) -> tuple[bytes, int]:
    kept = bytearray()
    total = 0
    while chunk := await stream.read(65536):
        total += len(chunk)
        if len(kept) < cap:
            kept += chunk[: cap - len(kept)]
    return bytes(kept), total


async def _feed(stdin: asyncio.StreamWriter, data: bytes) -> None:
    with contextlib.suppress(ConnectionError, BrokenPipeError):
        if data:
            stdin.write(data)
            await stdin.drain()
        stdin.close()


def _members(root_pid: int, cgroup: Path | None) -> list[int]:
    """The command's processes: its cgroup's, else ``root_pid``'s descendants."""
    if cgroup is not None:
        with contextlib.suppress(OSError):
            return [int(p) for p in (cgroup / "cgroup.procs").read_text().split()]
        return []
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                stat = (entry / "stat").read_text()
                ppid = int(stat.rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(entry.name))
    found: list[int] = []
    todo = [root_pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


async def _all_gone(root_pid: int, cgroup: Path | None) -> None:
    """Poll: processes give no event when they exit, short of being their parent."""
    while [p for p in _members(root_pid, cgroup) if p != root_pid]:  # noqa: ASYNC110
        await asyncio.sleep(0.05)
