"""Checkpoints of a workspace (SPEC S-03): a git commit of ``/workspace`` after each call
that may have changed it, stored durably in PostgreSQL so that any replica can restore
the session (the last checkpoint of a turn is that turn's checkpoint).

The repository lives outside the workspace (``Workspace.git_dir``) so a command cannot
rewrite history. The newest row of a session holds the whole repository as a git bundle;
older rows keep their commit id only (a bundle contains every earlier commit).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from dataclasses import dataclass
from pathlib import Path

import structlog
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from weft_storage.sandbox.checkpoints import EMPTY

from weft_sandbox.workspace import Workspace

log = structlog.get_logger(__name__)

BRANCH = "main"
EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
"""git's empty tree: what the first checkpoint is compared with."""
OUTPUT_PREFIX = "output/"


class CheckpointFailed(RuntimeError):
    """git could not commit or restore (an infrastructure failure: the call is retried)."""


@dataclass(frozen=True)
class Checkpoint:
    """The newest checkpoint of a session: its commit (:data:`EMPTY`: no files) and the
    session's newest bundle, which holds it (a fork or a rollback points a new row at an
    earlier commit of that bundle: ``weft_storage.sandbox.checkpoints``)."""

    seq: int
    commit: str
    bundle: bytes | None


@dataclass(frozen=True)
class OutputFile:
    """A regular file under ``/workspace/output`` that a checkpoint added or changed."""

    path: str
    """Relative to ``/workspace`` (``output/report.md``)."""
    size: int


@dataclass(frozen=True)
class Committed:
    """A stored checkpoint: its number and the deliverables it added or changed."""

    seq: int
    outputs: tuple[OutputFile, ...] = ()


class CheckpointStore:
    """``sandbox_checkpoints`` rows."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession]):
        self._sessions = sessions

    async def latest_seq(self, tenant_id: str, session_id: str) -> int:
        """The newest checkpoint's number (0: none)."""
        async with self._sessions() as db:
            seq = await db.scalar(
                text(
                    "SELECT coalesce(max(seq), 0) FROM sandbox_checkpoints "
                    "WHERE tenant_id = :t AND session_id = :s"
                ),
                {"t": tenant_id, "s": session_id},
            )
        return int(seq or 0)

    async def latest(self, tenant_id: str, session_id: str) -> Checkpoint | None:
        """The newest checkpoint with the newest bundle."""
        async with self._sessions() as db:
            row = (
                await db.execute(
                    text(
                        "SELECT c.seq, c.commit, (SELECT b.bundle FROM sandbox_checkpoints b "
                        "WHERE b.tenant_id = :t AND b.session_id = :s AND b.bundle IS NOT NULL "
                        "ORDER BY b.seq DESC LIMIT 1) FROM sandbox_checkpoints c "
                        "WHERE c.tenant_id = :t AND c.session_id = :s "
                        "ORDER BY c.seq DESC LIMIT 1"
                    ),
                    {"t": tenant_id, "s": session_id},
                )
            ).first()
        if row is None:
            return None
        return Checkpoint(int(row[0]), str(row[1]), None if row[2] is None else bytes(row[2]))

    async def save(
        self, space: Workspace, seq: int, *, request_id: str, call_id: str, commit: str,
        bundle: bytes,
    ) -> bool:  # fmt: skip
        """Store checkpoint ``seq``; False when another replica stored that number first."""
        params = {
            "t": space.tenant_id, "s": space.session_id, "q": seq, "r": request_id,
            "c": call_id, "commit": commit, "b": bundle, "n": len(bundle),
        }  # fmt: skip
        async with self._sessions() as db:
            try:
                await db.execute(
                    text(
                        "INSERT INTO sandbox_checkpoints "
                        "(tenant_id, session_id, seq, request_id, call_id, commit, bundle, "
                        "size_bytes) VALUES (:t, :s, :q, :r, :c, :commit, :b, :n)"
                    ),
                    params,
                )
            except IntegrityError:
                return False
            await db.execute(
                text(
                    "UPDATE sandbox_checkpoints SET bundle = NULL WHERE tenant_id = :t "
                    "AND session_id = :s AND seq < :q AND bundle IS NOT NULL"
                ),
                params,
            )
            await db.commit()
        return True


class GitCheckpoints:
    """git over a workspace, through subprocesses."""

    def __init__(self, store: CheckpointStore):
        self.store = store

    async def commit(self, space: Workspace, *, request_id: str, call_id: str) -> Committed | None:
        """Commit the workspace if it changed and store the checkpoint; None when nothing
        changed (or another replica stored that number first)."""
        if not space.git_dir.exists():
            await self._git(space, "init", "-q", "-b", BRANCH)
        await self._git(space, "add", "-A", ".")
        if not (await self._git(space, "status", "--porcelain")).strip():
            return None
        outputs = await self._changed_outputs(space)
        seq = space.checkpoint_seq + 1
        await self._git(space, "commit", "-q", "--no-verify", "-m", f"checkpoint {seq}",
                        "-m", f"request {request_id}, call {call_id}")  # fmt: skip
        commit = (await self._git(space, "rev-parse", "HEAD")).strip()
        bundle_path = space.home / "checkpoint.bundle"
        await self._git(space, "bundle", "create", "-q", str(bundle_path), BRANCH)
        bundle = await asyncio.to_thread(bundle_path.read_bytes)
        bundle_path.unlink()
        saved = await self.store.save(
            space, seq, request_id=request_id, call_id=call_id, commit=commit, bundle=bundle
        )
        if not saved:
            log.warning("checkpoint_taken", session_id=space.session_id, seq=seq)
            return None
        space.checkpoint_seq = seq
        return Committed(seq, outputs)

    async def _changed_outputs(self, space: Workspace) -> tuple[OutputFile, ...]:
        """The regular files under ``output/`` that the staged change adds or modifies
        (links and deletions are no deliverables)."""
        try:
            base = (await self._git(space, "rev-parse", "-q", "--verify", "HEAD")).strip()
        except CheckpointFailed:
            base = EMPTY_TREE
        listed = await self._git(
            space, "diff", "--cached", "--no-renames", "--diff-filter=AM", "--raw", "-z",
            base, "--", OUTPUT_PREFIX,
        )  # fmt: skip
        fields = listed.split("\0")
        found = []
        for meta, path in zip(fields[0::2], fields[1::2], strict=False):
            new_mode = meta.split()[1] if meta.count(" ") >= 1 else ""
            if new_mode not in ("100644", "100755"):
                continue
            with contextlib.suppress(OSError):
                found.append(OutputFile(path, (space.work / path).lstat().st_size))
        return tuple(found)

    async def restore(self, space: Workspace) -> bool:
        """Fill the (fresh, empty) workspace from the session's newest checkpoint; False
        when it has none or it stands for an empty workspace (rolled back before any
        file)."""
        latest = await self.store.latest(space.tenant_id, space.session_id)
        if latest is None:
            return False
        space.checkpoint_seq = latest.seq  # the next commit numbers after it, even if empty
        if latest.commit == EMPTY:
            log.info("checkpoint_restored_empty", session_id=space.session_id, seq=latest.seq)
            return False
        if latest.bundle is None:
            raise CheckpointFailed(f"checkpoint {latest.seq} has no bundle to restore from")
        bundle_path = space.home / "restore.bundle"
        await asyncio.to_thread(bundle_path.write_bytes, latest.bundle)
        await self._git(space, "init", "-q", "-b", BRANCH)
        await self._git(
            space, "fetch", "-q", "--update-head-ok", str(bundle_path), f"{BRANCH}:{BRANCH}"
        )
        # The row's commit, not the bundle's tip: after a fork or a rollback they differ,
        # and the branch moves there so later commits and bundles continue from it.
        await self._git(space, "checkout", "-q", "-f", "-B", BRANCH, latest.commit)
        bundle_path.unlink()
        if space.uid != os.getuid():  # the command's uid owns what it may change
            await asyncio.to_thread(_chown_tree, space)
        log.info("checkpoint_restored", session_id=space.session_id, seq=latest.seq)
        return True

    async def _git(self, space: Workspace, *args: str) -> str:
        env = {
            "GIT_DIR": str(space.git_dir), "GIT_WORK_TREE": str(space.work),
            "GIT_AUTHOR_NAME": "weft-sandbox", "GIT_AUTHOR_EMAIL": "sandbox@weft.invalid",
            "GIT_COMMITTER_NAME": "weft-sandbox", "GIT_COMMITTER_EMAIL": "sandbox@weft.invalid",
            "GIT_CONFIG_NOSYSTEM": "1", "HOME": str(space.home), "PATH": os.environ["PATH"],
        }  # fmt: skip
        # safe.directory: the work tree belongs to the sandbox's uid, not the service's;
        # hooks off: a command cannot plant one (the repository is outside its reach
        # anyway); symlinks stored as links, never followed.
        proc = await asyncio.create_subprocess_exec(
            "git", "-c", "safe.directory=*", "-c", "core.hooksPath=/dev/null",
            "-c", "core.symlinks=true", "-c", "gc.auto=0", *args,
            cwd=space.work, env=env,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await proc.communicate()
        if proc.returncode != 0:
            raise CheckpointFailed(f"git {args[0]} failed: {err.decode(errors='replace')[-500:]}")
        return out.decode(errors="replace")


def _chown_tree(space: Workspace) -> None:
    root = space.work
    for directory, dirs, files in os.walk(root):
        here = Path(directory)
        if here.relative_to(root).parts[:1] == ("input",):
            continue  # attachments stay the service's: read-only for commands
        os.lchown(here, space.uid, space.gid)
        for name in files + [d for d in dirs if (here / d).is_symlink()]:
            os.lchown(here / name, space.uid, space.gid)
