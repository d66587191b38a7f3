"""Skills in the sandbox (SPEC S-04, levels 2 and 3): ``read_file skill://<name>/<path>``
reads a file of an installed package, ``shell_exec(skill_name=<name>)`` runs a command
with the package mounted read-only at ``/skills/<name>`` (``$WEFT_SKILL_DIR``).

Only skills of the tenant whose sandbox runs them (the caller's, or a shared agent's
owner) that the turn's agent may use (``ToolContext.allowed_skills``, fail closed) are
found; any other name, another tenant's included, reads "not found", so nothing tells
whether it exists elsewhere. The packages are agent-config's: they are asked of it with
the call's turn credential (:mod:`weft_sandbox.skill_source`), and agent-config decides
whose package it is from the agent, never from what the call says.

A package is materialised once per content digest in a cache folder outside every
workspace, owned by the service and bound read-only into the command's sandbox; a new
version (another digest) gets a new folder.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from weft_contracts import ToolContext
from weft_contracts.skill_packages import (
    SKILL_FILE,
    PackageRejected,
    SkillPackage,
    check_path,
)

from weft_sandbox.skill_source import SkillSource, SkillsUnreachable

SKILL_SCHEME = "skill://"
MOUNT_ROOT = "/skills"
SKILL_DIR_ENV = "WEFT_SKILL_DIR"


class SkillUnavailable(LookupError):
    """The skill cannot be used by this call; the message is the model's error text."""


@dataclass(frozen=True)
class SkillRef:
    """A ``skill://<name>/<path>`` URI, parsed."""

    name: str
    path: str

    @classmethod
    def parse(cls, uri: str) -> SkillRef:
        """The skill and file a URI names; :class:`SkillUnavailable` when malformed."""
        rest = uri.strip().removeprefix(SKILL_SCHEME)
        name, _, path = rest.partition("/")
        try:
            return cls(name, check_path(path or SKILL_FILE))
        except PackageRejected as exc:
            raise SkillUnavailable(f"{uri[:200]!r} is not a skill file URI: {exc}") from None


def mount_point(name: str) -> str:
    """Where a command sees skill ``name``."""
    return f"{MOUNT_ROOT}/{name}"


class SkillLibrary:
    """The installed skills as the sandbox's tools use them."""

    def __init__(self, source: SkillSource, cache: Path):
        self._source = source
        self._cache = cache
        self._lock = asyncio.Lock()

    def start(self) -> None:
        """An empty cache (what a predecessor left may be stale); searchable by the
        sandbox uids, not listable."""
        shutil.rmtree(self._cache, ignore_errors=True)
        self._cache.mkdir(parents=True)
        self._cache.chmod(0o711)

    def stop(self) -> None:
        """Remove the cache (the packages stay in PostgreSQL)."""
        shutil.rmtree(self._cache, ignore_errors=True)

    async def package(
        self, context: ToolContext, tenant_id: str, name: str, credential: str | None
    ) -> SkillPackage:
        """The package of skill ``name`` this call may use; :class:`SkillUnavailable`
        when the agent may not use it or the tenant has none of that name (the same
        error both ways, which lists the agent's skills only), or when agent-config
        cannot answer (with that reason)."""
        found = None
        if context.permits_skill(name) and len(name) <= 64:
            try:
                found = await self._source.package(credential, tenant_id, context.agent_id, name)
            except SkillsUnreachable as exc:
                raise SkillUnavailable(str(exc)) from None
        if found is None:
            usable = ", ".join(sorted(context.allowed_skills or [])) or "none"
            raise SkillUnavailable(f"skill {name[:64]!r} not found; this agent's skills: {usable}")
        return found

    async def mount(self, owner_tenant_id: str, package: SkillPackage) -> Path:
        """The host folder holding ``package``'s files, read-only for commands."""
        tenant_key = hashlib.sha256(owner_tenant_id.encode()).hexdigest()[:24]
        target = self._cache / tenant_key / f"{package.name}-{package.digest[:24]}"
        async with self._lock:
            if not target.is_dir():
                await asyncio.to_thread(_materialise, package, target)
        return target


def _materialise(package: SkillPackage, target: Path) -> None:
    """Write the files in a temporary folder, then rename it into place (a reader never
    sees half a package)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    target.parent.chmod(0o711)
    staging = Path(tempfile.mkdtemp(dir=target.parent, prefix=".staging-"))
    for f in package.files:
        host = staging / f.path
        host.parent.mkdir(parents=True, exist_ok=True)
        host.write_bytes(f.content)
        host.chmod(0o755 if f.executable else 0o644)
    for directory, _, _ in os.walk(staging):
        Path(directory).chmod(0o755)  # the service's; commands see it through a ro-bind
    staging.rename(target)


def skill_file_text(package: SkillPackage, path: str) -> str:
    """The text of one package file; the SKILL.md read also tells how to use the rest
    (the reference's level 2: files available, how to run, the skill's folder)."""
    f = package.file(path)
    if f is None:
        listed = ", ".join(x.path for x in package.files[:50])
        raise SkillUnavailable(f"skill {package.name!r} has no file {path!r}; its files: {listed}")
    if b"\x00" in f.content[:8192]:
        raise SkillUnavailable(
            f"skill://{package.name}/{path} is a binary file; use it from shell_exec "
            f"skill_name={package.name!r} at {mount_point(package.name)}/{path}"
        )
    text = f.content.decode(errors="replace")
    if path != SKILL_FILE:
        return text
    files = "\n".join(
        f"- {x.path}" + (" (executable)" if x.executable else "") for x in package.files
    )
    footer = (
        f"\n\n[skill {package.name}: files:\n{files}\nRead a file with read_file "
        f'path="skill://{package.name}/<file>". Run its scripts with shell_exec '
        f'skill_name="{package.name}": the package is mounted read-only at '
        f"{mount_point(package.name)} (${SKILL_DIR_ENV}); the working folder stays "
        "/workspace.]"
    )
    return text + footer
