"""Skill packages (SPEC S-04): a folder with ``SKILL.md`` at its root, whose YAML
frontmatter names and describes the skill, plus scripts and resources. The format is a
contract: agent-config stores packages (it owns ``skill_packages``), the sandbox mounts
what agent-config hands it, and both check the same rules.

A package arrives as a zip or as a list of files; both become a :class:`SkillPackage`
only after every check here passed, so what is stored, listed and mounted into a sandbox
is always a valid package: safe relative paths only (no ``..``, no absolute path, no
symlink, no device), bounded sizes, a frontmatter that parses.
"""

from __future__ import annotations

import hashlib
import io
import re
import stat
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import yaml

SKILL_FILE = "SKILL.md"
NAME_MAX = 64
DESCRIPTION_MAX = 1024
MAX_FILES = 200
MAX_FILE_BYTES = 1024 * 1024
MAX_PACKAGE_BYTES = 4 * 1024 * 1024
"""The sum of the files' sizes (uncompressed)."""
MAX_ARCHIVE_BYTES = 4 * 1024 * 1024
"""A zip upload's own size, checked before it is opened."""
MAX_PATH_CHARS = 255
MAX_DEPTH = 8

NAME = re.compile(r"^[a-z0-9](?:[a-z0-9_-]{0,62}[a-z0-9])?$")
"""A safe slug: a folder name, an env value and a URI segment without quoting."""
SEGMENT = re.compile(r"^[A-Za-z0-9._+-][A-Za-z0-9 ._+-]{0,127}$")
"""One path segment of a package file (no shell or URI metacharacters)."""


class PackageRejected(ValueError):
    """The package is not valid; the message says why (HTTP 422)."""


class PackageTooLarge(PackageRejected):
    """The package exceeds a size or count cap (HTTP 413)."""


@dataclass(frozen=True)
class SkillFile:
    """One file of a package, at a checked relative path."""

    path: str
    content: bytes
    executable: bool = False


@dataclass(frozen=True)
class SkillPackage:
    """A validated package."""

    name: str
    description: str
    files: tuple[SkillFile, ...]

    @property
    def size_bytes(self) -> int:
        """The files' total size."""
        return sum(len(f.content) for f in self.files)

    @property
    def digest(self) -> str:
        """A content hash: equal packages have equal digests (sandboxes cache by it)."""
        h = hashlib.sha256()
        for f in self.files:
            h.update(f"{f.path}\x00{int(f.executable)}\x00{len(f.content)}\x00".encode())
            h.update(f.content)
        return h.hexdigest()

    def file(self, path: str) -> SkillFile | None:
        """The file at ``path`` (relative to the package root), or None."""
        return next((f for f in self.files if f.path == path), None)


def check_name(name: str) -> str:
    """``name`` when it is a valid skill name, else :class:`PackageRejected`."""
    if len(name) > NAME_MAX:
        raise PackageRejected(f"the skill name is {len(name)} characters; at most {NAME_MAX}")
    if not NAME.match(name):
        raise PackageRejected(
            f"the skill name {name[:NAME_MAX]!r} is not a slug: lowercase letters, digits, "
            "'-' and '_', starting and ending with a letter or digit"
        )
    return name


def check_path(path: str) -> str:
    """``path`` normalised when it is a safe relative path inside the package."""
    if not path or "\x00" in path or "\\" in path:
        raise PackageRejected(f"file path {path[:80]!r} is empty or contains '\\' or NUL")
    if path.startswith("/") or re.match(r"^[A-Za-z]:", path):
        raise PackageRejected(f"file path {path[:80]!r} is absolute; paths are relative")
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise PackageRejected(f"file path {path[:80]!r} leaves the package ('..')")
    if not parts or len(path) > MAX_PATH_CHARS or len(parts) > MAX_DEPTH:
        raise PackageRejected(
            f"file path {path[:80]!r} is empty, longer than {MAX_PATH_CHARS} characters "
            f"or deeper than {MAX_DEPTH} folders"
        )
    for part in parts:
        if not SEGMENT.match(part):
            raise PackageRejected(
                f"file path {path[:80]!r}: segment {part[:40]!r} may use letters, digits, "
                "space and . _ + - only"
            )
    return "/".join(parts)


def parse_frontmatter(text: str) -> tuple[str, str]:
    """(name, description) from ``SKILL.md``'s YAML frontmatter."""
    lines = text.lstrip("\ufeff").splitlines()
    if not lines or lines[0].strip() != "---":
        raise PackageRejected("SKILL.md must start with a YAML frontmatter block ('---')")
    try:
        end = next(i for i, line in enumerate(lines[1:], 1) if line.strip() == "---")
    except StopIteration:
        raise PackageRejected("SKILL.md's frontmatter is not closed by a '---' line") from None
    try:
        meta: Any = yaml.safe_load("\n".join(lines[1:end]))
    except yaml.YAMLError as exc:
        raise PackageRejected(f"SKILL.md's frontmatter is not valid YAML: {exc}") from None
    if not isinstance(meta, dict):
        raise PackageRejected("SKILL.md's frontmatter must be a mapping with name and description")
    name, description = meta.get("name"), meta.get("description")
    if not isinstance(name, str) or not name.strip():
        raise PackageRejected("SKILL.md's frontmatter needs a 'name' string")
    if not isinstance(description, str) or not description.strip():
        raise PackageRejected("SKILL.md's frontmatter needs a 'description' string")
    description = description.strip()
    if len(description) > DESCRIPTION_MAX:
        raise PackageRejected(
            f"the description is {len(description)} characters; at most {DESCRIPTION_MAX}"
        )
    return check_name(name.strip()), description


def build_package(files: Iterable[SkillFile]) -> SkillPackage:
    """A package from checked-or-not files: paths checked, caps applied, frontmatter
    parsed; :class:`PackageRejected` (or :class:`PackageTooLarge`) otherwise."""
    by_path: dict[str, SkillFile] = {}
    total = 0
    for f in files:
        path = check_path(f.path)
        if path in by_path:
            raise PackageRejected(f"file path {path!r} appears twice")
        if len(by_path) >= MAX_FILES:
            raise PackageTooLarge(f"the package has more than {MAX_FILES} files")
        if len(f.content) > MAX_FILE_BYTES:
            raise PackageTooLarge(f"{path!r} is {len(f.content)} bytes; at most {MAX_FILE_BYTES}")
        total += len(f.content)
        if total > MAX_PACKAGE_BYTES:
            raise PackageTooLarge(f"the package is over {MAX_PACKAGE_BYTES} bytes")
        by_path[path] = SkillFile(path, f.content, f.executable)
    folders = {"/".join(p.split("/")[:i]) for p in by_path for i in range(1, p.count("/") + 1)}
    if clash := sorted(folders & by_path.keys()):
        raise PackageRejected(f"{clash[0]!r} is both a file and a folder")
    skill = by_path.get(SKILL_FILE)
    if skill is None:
        raise PackageRejected("the package has no SKILL.md at its root")
    try:
        text = skill.content.decode()
    except UnicodeDecodeError:
        raise PackageRejected("SKILL.md is not UTF-8 text") from None
    name, description = parse_frontmatter(text)
    return SkillPackage(name, description, tuple(by_path[p] for p in sorted(by_path)))


def package_from_zip(data: bytes) -> SkillPackage:
    """A package from a zip upload. Its entries may sit under one top folder (a zipped
    folder); symlinks, devices, encrypted entries and paths leaving the folder are refused,
    and sizes are capped by what is actually read, not by what the zip declares."""
    if len(data) > MAX_ARCHIVE_BYTES:
        raise PackageTooLarge(f"the zip is {len(data)} bytes; at most {MAX_ARCHIVE_BYTES}")
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        entries = [e for e in archive.infolist() if not e.is_dir()]
    except (zipfile.BadZipFile, ValueError, OSError) as exc:
        raise PackageRejected(f"not a valid zip file: {exc}") from None
    if len(entries) > MAX_FILES:
        raise PackageTooLarge(f"the package has more than {MAX_FILES} files")
    for entry in entries:
        check_path(entry.filename)  # refuse '..' and absolute names before any stripping
        _check_entry(entry)
    prefix = _common_folder([e.filename for e in entries])
    with archive:
        files = [
            SkillFile(
                entry.filename.removeprefix(prefix),
                _read_entry(archive, entry),
                bool((entry.external_attr >> 16) & 0o111),
            )
            for entry in entries
        ]
    return build_package(files)


def _check_entry(entry: zipfile.ZipInfo) -> None:
    mode = entry.external_attr >> 16
    kind = stat.S_IFMT(mode)
    if kind == stat.S_IFLNK:
        raise PackageRejected(f"zip entry {entry.filename[:80]!r} is a symlink; not allowed")
    if kind not in (0, stat.S_IFREG):
        raise PackageRejected(f"zip entry {entry.filename[:80]!r} is not a regular file")
    if entry.flag_bits & 0x1:
        raise PackageRejected(f"zip entry {entry.filename[:80]!r} is encrypted")


def _read_entry(archive: zipfile.ZipFile, entry: zipfile.ZipInfo) -> bytes:
    try:
        with archive.open(entry) as stream:
            content = stream.read(MAX_FILE_BYTES + 1)
    except (zipfile.BadZipFile, NotImplementedError, RuntimeError, OSError, EOFError) as exc:
        raise PackageRejected(f"zip entry {entry.filename[:80]!r} cannot be read: {exc}") from None
    if len(content) > MAX_FILE_BYTES:
        raise PackageTooLarge(f"zip entry {entry.filename[:80]!r} is over {MAX_FILE_BYTES} bytes")
    return content


def _common_folder(names: list[str]) -> str:
    """``top/`` when every entry lies in one top folder and SKILL.md is not at the root."""
    if SKILL_FILE in names or not names:
        return ""
    tops = {n.split("/", 1)[0] for n in names}
    if len(tops) == 1 and all("/" in n for n in names):
        return f"{tops.pop()}/"
    return ""


def package_to_zip(package: SkillPackage) -> bytes:
    """The package as a deterministic zip (how it is stored)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for f in package.files:
            info = zipfile.ZipInfo(f.path, date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = (stat.S_IFREG | (0o755 if f.executable else 0o644)) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, f.content)
    return buffer.getvalue()
