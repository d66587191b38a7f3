"""Skill packages for tests (SPEC S-04): a SKILL.md with frontmatter and zips built entry
by entry, hostile ones included (symlinks, ``..``, absolute names)."""

from __future__ import annotations

import io
import stat
import zipfile

GREETER_SCRIPT = b'#!/bin/sh\necho "greetings from $WEFT_SKILL_DIR: $1"\n'


def skill_md(name: str, description: str = "Greets people by name.", body: str = "") -> bytes:
    """A SKILL.md whose frontmatter names and describes the skill."""
    text = f"---\nname: {name}\ndescription: {description}\n---\n# {name}\n\n"
    text += body or "Run `scripts/greet.sh NAME` with shell_exec skill_name.\n"
    return text.encode()


def make_zip(entries: list[tuple[str, bytes, int]]) -> bytes:
    """A zip with (name, content, unix mode) entries, written as given (no cleaning)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, content, mode in entries:
            info = zipfile.ZipInfo(name)
            info.external_attr = mode << 16
            archive.writestr(info, content)
    return buffer.getvalue()


def greeter_zip(name: str = "greeter", *, folder: str = "") -> bytes:
    """A valid package: SKILL.md and an executable script (optionally under a folder)."""
    return make_zip(
        [
            (f"{folder}SKILL.md", skill_md(name), stat.S_IFREG | 0o644),
            (f"{folder}scripts/greet.sh", GREETER_SCRIPT, stat.S_IFREG | 0o755),
        ]
    )


def symlink_zip(name: str = "linky", target: str = "/etc/passwd") -> bytes:
    """A package with a symlink entry pointing at ``target``."""
    return make_zip(
        [
            ("SKILL.md", skill_md(name), stat.S_IFREG | 0o644),
            ("passwd", target.encode(), stat.S_IFLNK | 0o777),
        ]
    )
