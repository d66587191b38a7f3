"""The tenants' installed skills (SPEC S-04): ``skill_packages`` rows, one per (tenant,
name), each with its package as a zip. The gateway installs and deletes them, agent-config
lists their names and descriptions for a turn, the sandbox reads and mounts them. Every
query is scoped by tenant: another tenant's skill is simply absent."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import bindparam, text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from weft_contracts.skill_packages import SkillPackage, package_from_zip, package_to_zip


class SkillExists(ValueError):
    """A skill with this name is installed already (HTTP 409)."""


@dataclass(frozen=True, kw_only=True)
class SkillSummary:
    """What lists show and level 1 of a prompt uses."""

    name: str
    description: str
    digest: str
    size_bytes: int
    file_count: int
    updated_at: datetime


@dataclass(frozen=True, kw_only=True)
class StoredSkill:
    """An installed skill with its files."""

    summary: SkillSummary
    package: SkillPackage


_SUMMARY = "name, description, digest, size_bytes, file_count, updated_at"


def _summary(row: Sequence[object]) -> SkillSummary:
    name, description, digest, size, count, updated = row
    assert isinstance(updated, datetime)
    return SkillSummary(
        name=str(name), description=str(description), digest=str(digest),
        size_bytes=int(str(size)), file_count=int(str(count)), updated_at=updated,
    )  # fmt: skip


class SkillStore:
    """``skill_packages`` rows of each tenant."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession]):
        self._sessions = sessions

    async def install(
        self,
        tenant_id: str,
        package: SkillPackage,
        *,
        replace: bool = False,
        installer_session: str | None = None,
    ) -> SkillSummary:
        """Store ``package`` (already validated); :class:`SkillExists` when its name is
        taken and ``replace`` is false. An installer session (``installer_session``)
        replaces only a skill that same session installed."""
        params = {
            "t": tenant_id, "n": package.name, "d": package.description,
            "g": package.digest, "a": package_to_zip(package), "s": package.size_bytes,
            "c": len(package.files), "i": installer_session,
        }  # fmt: skip
        update = (
            "DO UPDATE SET description = excluded.description, digest = excluded.digest, "
            "archive = excluded.archive, size_bytes = excluded.size_bytes, "
            "file_count = excluded.file_count, "
            "installer_session = excluded.installer_session, updated_at = now()"
        )
        if installer_session is not None:
            conflict = f"{update} WHERE skill_packages.installer_session = :i"
        else:
            conflict = update if replace else "DO NOTHING"
        async with self._sessions() as db:
            row = (
                await db.execute(
                    text(
                        "INSERT INTO skill_packages (tenant_id, name, description, digest, "
                        "archive, size_bytes, file_count, installer_session) "
                        "VALUES (:t, :n, :d, :g, :a, :s, :c, :i) "
                        f"ON CONFLICT (tenant_id, name) {conflict} RETURNING {_SUMMARY}"
                    ),
                    params,
                )
            ).first()
            await db.commit()
        if row is None:
            raise SkillExists(f"a skill named {package.name!r} is installed already")
        return _summary(row)

    async def list(self, tenant_id: str, names: Sequence[str] | None = None) -> list[SkillSummary]:
        """The tenant's skills by name (only ``names`` when given)."""
        query = f"SELECT {_SUMMARY} FROM skill_packages WHERE tenant_id = :t"
        params: dict[str, object] = {"t": tenant_id}
        statement = text(query + " ORDER BY name")
        if names is not None:
            statement = text(query + " AND name IN :names ORDER BY name").bindparams(
                bindparam("names", expanding=True)
            )
            params["names"] = list(names)
            if not names:
                return []
        async with self._sessions() as db:
            rows = (await db.execute(statement, params)).all()
        return [_summary(row) for row in rows]

    async def get(self, tenant_id: str, name: str) -> StoredSkill | None:
        """The tenant's skill ``name`` with its files, or None."""
        async with self._sessions() as db:
            row = (
                await db.execute(
                    text(
                        f"SELECT {_SUMMARY}, archive FROM skill_packages "
                        "WHERE tenant_id = :t AND name = :n"
                    ),
                    {"t": tenant_id, "n": name},
                )
            ).first()
        if row is None:
            return None
        return StoredSkill(summary=_summary(row[:6]), package=package_from_zip(bytes(row[6])))

    async def delete(self, tenant_id: str, name: str) -> bool:
        """Remove the tenant's skill; False when it had none of that name."""
        async with self._sessions() as db:
            result = await db.execute(
                text("DELETE FROM skill_packages WHERE tenant_id = :t AND name = :n RETURNING 1"),
                {"t": tenant_id, "n": name},
            )
            deleted = result.first() is not None
            await db.commit()
        return deleted
