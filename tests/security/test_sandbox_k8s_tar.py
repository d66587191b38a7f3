"""A session pod's workspace comes back to the replica as a tar that whatever ran in the pod
wrote (the Kubernetes sandbox backend): escapes are skipped, never followed, and the
attachments folder is never replaced from the pod (SPEC S-01, S-02)."""

from __future__ import annotations

import io
import os
import shutil
import stat
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from weft_sandbox.k8s_sync import pack, tree_digest, unpack
from weft_sandbox.workspace import Workspace, WorkspacePool


@pytest.fixture
def space() -> Iterator[Workspace]:
    root = Path(tempfile.mkdtemp(prefix="weft-k8s-tar-"))
    root.chmod(0o711)  # as root the pool wants its parents searchable
    pool = WorkspacePool(root / "replica", size_bytes=8 * 1024 * 1024, uid_base=200_000)
    pool.start()
    try:
        yield pool.create("tenant-a", "session-1")
    finally:
        pool.close()
        shutil.rmtree(root, ignore_errors=True)


def _tar(*members: tuple[tarfile.TarInfo, bytes | None]) -> io.BytesIO:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for info, data in members:
            if data is not None:
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    out.seek(0)
    return out


def _info(name: str, kind: bytes = tarfile.REGTYPE, **fields: object) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    for key, value in fields.items():
        setattr(info, key, value)
    return info


def test_escapes_from_a_pods_tar_are_skipped(space: Workspace, tmp_path: Path) -> None:
    outside = space.home.parent.parent / "outside.txt"
    # The links point at a decoy of the host's files, never at the host's own: with the
    # guard broken (as its check does on purpose) this test runs as root and must fail
    # without touching the machine.
    decoy = tmp_path / "etc"
    decoy.mkdir()
    (decoy / "passwd").write_text("root:x:0:0:root:/root:/bin/bash\n")
    (space.work / "input" / "data.csv").write_text("attachment\n")
    hostile = _tar(
        (_info("./"), None),
        (_info("./ok.txt"), b"fine\n"),
        (_info("./etc-link", tarfile.SYMTYPE, linkname=str(decoy)), None),
        (_info("./etc-link/passwd"), b"root::0:0::/:/bin/sh\n"),
        (_info("./up", tarfile.SYMTYPE, linkname="../../.."), None),
        (_info("./up/outside.txt"), b"escaped\n"),
        (_info("../outside.txt"), b"escaped\n"),
        (_info("./hard", tarfile.LNKTYPE, linkname=str(decoy / "passwd")), None),
        (_info("./null", tarfile.CHRTYPE, devmajor=1, devminor=3), None),
        (_info("./input/data.csv"), b"replaced\n"),
        (_info("./tool", mode=0o6777), b"#!/bin/sh\n"),
    )
    skipped = unpack(space, hostile)

    assert skipped >= 5, skipped  # the links out, ../, the hard link, the device
    assert (space.work / "ok.txt").read_text() == "fine\n"
    assert not outside.exists() and not (space.home / "outside.txt").exists()
    assert (decoy / "passwd").read_text() == "root:x:0:0:root:/root:/bin/bash\n"
    assert not (space.work / "etc-link").is_symlink()
    assert not (space.work / "up").is_symlink()
    assert not (space.work / "null").exists() and not (space.work / "hard").exists()
    assert (space.work / "input" / "data.csv").read_text() == "attachment\n"
    mode = (space.work / "tool").stat().st_mode
    assert not mode & (stat.S_ISUID | stat.S_ISGID | stat.S_IWOTH), oct(mode)
    for path in space.work.rglob("*"):  # everything landed inside the workspace
        assert space.work.resolve() in path.resolve().parents or path.is_symlink(), path


def test_a_pull_replaces_the_copy_but_never_its_input(space: Workspace) -> None:
    (space.work / "input" / "data.csv").write_text("attachment\n")
    (space.work / "stale.txt").write_text("deleted in the pod\n")
    (space.work / "inside").symlink_to("output")  # a link inside stays a link
    packed = io.BytesIO()
    pack(space.work, packed)
    packed.seek(0)
    with tarfile.open(fileobj=packed) as tar:
        names = set(tar.getnames())
    assert {"input/data.csv", "stale.txt", "inside", "output"} <= names

    link = _info("./inside", tarfile.SYMTYPE, linkname="fresh.txt")
    unpack(space, _tar((_info("./fresh.txt"), b"new\n"), (link, None)))
    assert sorted(p.name for p in space.work.iterdir()) == ["fresh.txt", "input", "inside"]
    assert os.readlink(space.work / "inside") == "fresh.txt"
    assert (space.work / "input" / "data.csv").read_text() == "attachment\n"


def test_the_digest_sees_every_change(space: Workspace) -> None:
    first = tree_digest(space.work)
    (space.work / "empty-folder").mkdir()
    second = tree_digest(space.work)
    (space.work / "a.txt").write_text("a")
    third = tree_digest(space.work)
    (space.work / "a.txt").chmod(0o755)
    assert len({first, second, third, tree_digest(space.work)}) == 4
