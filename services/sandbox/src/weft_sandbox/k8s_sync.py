"""Moving a workspace between the replica's copy and a session pod, as tar streams (what
``kubectl cp`` does over exec).

The replica's copy stays the one the file tools and checkpoints work on; the pod's is
where commands run. A tar coming back from a pod was written by whatever ran there, so it
is extracted under :func:`tarfile.data_filter` (no absolute paths, no ``..``, no links or
writes leading out, no devices, no setuid bits); a member it refuses is skipped, never
followed.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tarfile
from pathlib import Path
from typing import BinaryIO

import structlog

from weft_sandbox.workspace import INPUT, Workspace

log = structlog.get_logger(__name__)


def tree_digest(work: Path) -> str:
    """A digest of the tree's shape: paths, kinds, sizes, modes, times, link targets of its
    files and folders. Two copies with the same digest hold the same files (times are
    nanoseconds)."""
    digest = hashlib.sha256()
    for directory, dirs, files in os.walk(work):
        dirs.sort()
        here = Path(directory)
        for name in sorted(files) + dirs:  # folders too: an empty one is content
            path = here / name
            stat = path.lstat()
            link = os.readlink(path) if path.is_symlink() else ""
            line = f"{path.relative_to(work)}\0{stat.st_mode}\0{stat.st_size}\0"
            digest.update(f"{line}{stat.st_mtime_ns}\0{link}\n".encode(errors="surrogateescape"))
    return digest.hexdigest()


def pack(work: Path, out: BinaryIO) -> None:
    """The whole copy, ``input`` included, as a tar (links stored as links)."""
    with tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        for entry in sorted(work.iterdir()):
            tar.add(entry, arcname=entry.name, recursive=True)


def content_bytes(src: BinaryIO) -> int:
    """The bytes of the regular files in the tar ``src`` (headers read, data skipped)."""
    with tarfile.open(fileobj=src, mode="r:") as tar:
        return sum(member.size for member in tar if member.isreg())


def input_bytes(space: Workspace) -> int:
    """The bytes of the attachments, which a pull keeps beside what it brings."""
    folder = space.work / INPUT
    return sum((Path(d) / f).lstat().st_size for d, _, files in os.walk(folder) for f in files)


def unpack(space: Workspace, src: BinaryIO) -> int:
    """Replace the copy (all but ``input``, which commands cannot change) with the tar
    ``src``; the number of members skipped as unsafe."""
    work = space.work
    for entry in work.iterdir():
        if entry.name == INPUT:
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
    skipped = 0
    owner = (space.uid, space.gid) if os.geteuid() == 0 else None

    def safe(member: tarfile.TarInfo, dest: str) -> tarfile.TarInfo | None:
        nonlocal skipped
        name = member.name.removeprefix("./")
        if name in ("", ".") or name == INPUT or name.startswith(f"{INPUT}/"):
            return None
        try:
            checked = tarfile.data_filter(member, dest)
        except tarfile.FilterError as exc:
            skipped += 1
            log.warning("sandbox_pod_member_skipped", member=member.name[:200], reason=str(exc))
            return None
        if owner is None:  # not root: extracted files are the service's anyway
            return checked
        return checked.replace(uid=owner[0], gid=owner[1], uname="", gname="", deep=False)

    with tarfile.open(fileobj=src, mode="r|") as tar:
        tar.extractall(work, filter=safe)
    return skipped
