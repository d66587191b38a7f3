"""One workspace per (tenant, session) on this replica (SPEC S-01, S-02).

On the host a workspace is ``<root>/<key>/`` where ``key`` hashes tenant and session, so a
session id alone (another tenant's, a forged one) never names someone else's files:

- ``ws/`` is what commands see as ``/workspace`` (``ws/input`` read-only for them, as
  ``/workspace/input``; ``ws/output`` for deliverables). When the service runs as root it
  is a tmpfs mounted with the size cap, owned by the sandbox's own uid; otherwise the cap
  is checked after each change (``quota = "checked"``).
- ``git/`` is the checkpoint repository (outside ``ws`` so commands cannot rewrite it).

A replica's workspaces are a cache: the durable copy is the latest checkpoint in
PostgreSQL (:mod:`weft_sandbox.checkpoints`).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import structlog

log = structlog.get_logger(__name__)

WORKSPACE = "/workspace"
INPUT = "input"
OUTPUT = "output"

Quota = Literal["tmpfs", "checked"]


class PathRefused(ValueError):
    """A path the sandbox will not touch; the message is the tool error the model reads."""


def workspace_key(tenant_id: str, session_id: str) -> str:
    """The host directory name of a session's workspace."""
    return hashlib.sha256(f"{tenant_id}\x00{session_id}".encode()).hexdigest()[:32]


@dataclass(eq=False, kw_only=True)
class Workspace:
    """One session's workspace on this replica."""

    tenant_id: str
    session_id: str
    home: Path
    """``<root>/<key>``."""
    uid: int
    gid: int
    checkpoint_seq: int = 0
    """The checkpoint this copy matches (0: none yet)."""
    last_used: float = field(default_factory=time.monotonic)
    bytes_used: int = 0
    """What its files held when last measured (after each change): the budget counts it."""
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    """Serialises the session's calls on this replica (T-16: append/edit per path)."""

    @property
    def work(self) -> Path:
        """The host directory mounted as ``/workspace``."""
        return self.home / "ws"

    @property
    def git_dir(self) -> Path:
        """The checkpoint repository."""
        return self.home / "git"

    def touch(self) -> None:
        """Mark as used now (idle TTL, S-05)."""
        self.last_used = time.monotonic()

    def host_path(self, path: str, *, for_write: bool = False) -> Path:
        """The host path of a sandbox path (``/workspace/...`` or relative to it), refusing
        anything that leaves the workspace: ``..``, other absolute paths, symlinks whose
        target is outside, and (``for_write``) ``/workspace/input``."""
        text = path.strip()
        if "\x00" in text:
            raise PathRefused("path contains a NUL byte")
        if text == WORKSPACE or text.startswith(WORKSPACE + "/"):
            relative = text[len(WORKSPACE) :].lstrip("/")
        elif text.startswith("/"):
            raise PathRefused(
                f"{path!r} is outside /workspace; sandbox paths start with /workspace"
            )
        else:
            relative = text
        parts = [p for p in relative.split("/") if p not in ("", ".")]
        if ".." in parts:
            raise PathRefused(f"{path!r} leaves /workspace ('..' is not allowed)")
        candidate = self.work.joinpath(*parts)
        root = self.work.resolve()
        resolved = candidate.resolve()  # follows symlinks a command may have planted
        if resolved != root and root not in resolved.parents:
            raise PathRefused(f"{path!r} resolves outside /workspace (a symlink pointing out)")
        if for_write:
            inside = resolved.relative_to(root).parts
            if not inside:
                raise PathRefused("/workspace itself is a folder, not a file")
            if inside[0] == INPUT:
                raise PathRefused("/workspace/input is read-only (attachments)")
        return resolved

    def sandbox_path(self, host: Path) -> str:
        """The path a command sees for the host path ``host``."""
        inside = host.resolve().relative_to(self.work.resolve())
        return "/".join([WORKSPACE, *inside.parts])


class WorkspacePool:
    """This replica's workspaces: created on first use, capped, dropped when idle."""

    def __init__(self, root: Path, *, size_bytes: int, uid_base: int):
        self.root = root
        self.size_bytes = size_bytes
        self._uid_base = uid_base
        self.privileged = os.geteuid() == 0
        self.quota: Quota = "checked"
        self._spaces: dict[str, Workspace] = {}

    def start(self) -> None:
        """Clear what a killed predecessor on this root left (its mounts included: the
        durable copies are the checkpoints), then decide how the size cap is kept."""
        self.root.mkdir(parents=True, exist_ok=True)
        for stale in self.root.iterdir():
            _remove(stale)
        if self.privileged:  # bubblewrap runs as the sandbox's uid: it must reach ``ws``
            self.root.chmod(0o711)
            closed = [p for p in self.root.parents if not p.stat().st_mode & 0o001]
            if closed:
                raise PermissionError(
                    f"the sandbox uids cannot reach {self.root}: {closed[0]} is not "
                    "searchable by others (chmod o+x, or set WEFT_SANDBOX_ROOT elsewhere)"
                )
        self.quota = "tmpfs" if self.privileged and _can_mount(self.root) else "checked"
        log.info("sandbox_workspaces", root=str(self.root), quota=self.quota)

    def get(self, tenant_id: str, session_id: str) -> Workspace | None:
        """The session's workspace on this replica, if any."""
        return self._spaces.get(workspace_key(tenant_id, session_id))

    def create(self, tenant_id: str, session_id: str) -> Workspace:
        """A fresh, empty workspace for the session (replacing any local copy)."""
        key = workspace_key(tenant_id, session_id)
        old = self._spaces.pop(key, None)
        if old is not None:
            _remove(old.home)
        uid = self._uid_base + int(key[:8], 16) % 1_000_000 if self.privileged else os.getuid()
        gid = uid if self.privileged else os.getgid()
        space = Workspace(
            tenant_id=tenant_id, session_id=session_id, home=self.root / key, uid=uid, gid=gid
        )
        space.home.mkdir()
        space.home.chmod(0o711)  # searchable, not listable: the uid reaches only its ``ws``
        space.work.mkdir()
        if self.quota == "tmpfs":
            options = f"size={self.size_bytes},mode=0755,uid={uid},gid={gid},nosuid,nodev"
            _run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(space.work)])
        (space.work / INPUT).mkdir(exist_ok=True)
        (space.work / OUTPUT).mkdir(exist_ok=True)
        if self.privileged:
            os.chown(space.work / OUTPUT, uid, gid)  # input stays root's: read-only
            os.chown(space.work, uid, gid)
        self._spaces[key] = space
        return space

    def drop(self, space: Workspace) -> None:
        """Forget and delete the local copy (its checkpoints stay)."""
        self._spaces.pop(workspace_key(space.tenant_id, space.session_id), None)
        _remove(space.home)

    def over_cap(self, space: Workspace) -> int | None:
        """The workspace's size when over the cap (``checked`` quota only), else None."""
        if self.quota == "tmpfs":
            return None
        used = _tree_bytes(space.work)
        return used if used > self.size_bytes else None

    def measure(self, space: Workspace) -> int:
        """Measure what the workspace's files hold now (kept as ``bytes_used``): a tmpfs's
        used pages (its memory), else the sizes of the files under it."""
        if self.quota == "tmpfs" and os.path.ismount(space.work):
            stat = os.statvfs(space.work)
            space.bytes_used = (stat.f_blocks - stat.f_bfree) * stat.f_frsize
        else:
            space.bytes_used = _tree_bytes(space.work)
        return space.bytes_used

    def held(self, tenant_id: str | None = None) -> int:
        """Bytes held by the workspaces of ``tenant_id`` (None: all) on this replica."""
        return sum(
            s.bytes_used for s in self._spaces.values()
            if tenant_id is None or s.tenant_id == tenant_id
        )  # fmt: skip

    def tenants(self) -> dict[str, int]:
        """Bytes held per tenant on this replica."""
        held: dict[str, int] = {}
        for space in self._spaces.values():
            held[space.tenant_id] = held.get(space.tenant_id, 0) + space.bytes_used
        return held

    def least_recently_used(self, tenant_id: str | None, *, besides: Workspace) -> Workspace | None:
        """The idle workspace (of ``tenant_id``; None: of any tenant) unused the longest,
        holding bytes, other than ``besides``: the first to evict."""
        idle = [
            s for s in self.idle(0)
            if s is not besides and s.bytes_used > 0
            and (tenant_id is None or s.tenant_id == tenant_id)
        ]  # fmt: skip
        return min(idle, key=lambda s: s.last_used, default=None)

    def idle(self, ttl_s: float) -> list[Workspace]:
        """Workspaces unused for ``ttl_s`` and not busy."""
        now = time.monotonic()
        return [
            s for s in self._spaces.values() if now - s.last_used > ttl_s and not s.lock.locked()
        ]

    def __len__(self) -> int:
        return len(self._spaces)

    def bytes_used(self) -> int:
        """What the held workspaces measured last (each measured after its changes)."""
        return sum(space.bytes_used for space in list(self._spaces.values()))

    def close(self) -> None:
        """Drop every local copy (shutdown)."""
        for space in list(self._spaces.values()):
            self.drop(space)


def _tree_bytes(top: Path) -> int:
    """The sizes of the files under ``top`` (links not followed)."""
    return sum((Path(d) / f).lstat().st_size for d, _, files in os.walk(top) for f in files)


def _can_mount(root: Path) -> bool:
    probe = root / ".mount-probe"
    probe.mkdir(exist_ok=True)
    try:
        _run(["mount", "-t", "tmpfs", "-o", "size=4096", "tmpfs", str(probe)])
        _run(["umount", str(probe)])
        return True
    except (OSError, subprocess.CalledProcessError):
        return False
    finally:
        probe.rmdir()


def _remove(home: Path) -> None:
    """Unmount every mount under ``home`` (a tmpfs workspace), then delete it."""
    work = home / "ws"
    if os.path.ismount(work):
        subprocess.run(["umount", "-l", str(work)], check=False, capture_output=True)
    shutil.rmtree(home, ignore_errors=True)


def _run(argv: list[str]) -> None:
    subprocess.run(argv, check=True, capture_output=True, timeout=30)
