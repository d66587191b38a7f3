"""Skills in the real store and the real sandbox (SPEC S-04): the tenant-scoped
``skill_packages`` rows, ``read_file skill://`` (level 2 and 3) and
``shell_exec(skill_name=...)`` with the package mounted read-only (bubblewrap, PostgreSQL,
Redis; only the bus is a recorder)."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from weft_contracts.skill_packages import package_from_zip
from weft_storage.agent_config.skills import SkillExists, SkillStore

from tests.integration.sandbox_kit import Sandbox, open_sandbox
from tests.skill_kit import greeter_zip, make_zip, skill_md


@pytest.fixture
async def sandbox(
    sessions: async_sessionmaker[AsyncSession], redis: Redis
) -> AsyncIterator[Sandbox]:
    async with open_sandbox(sessions, redis) as running:
        yield running


async def test_the_store_is_scoped_by_tenant(
    sessions: async_sessionmaker[AsyncSession],
) -> None:  # SPEC S-04
    store = SkillStore(sessions)
    mine, theirs = f"t-{secrets.token_hex(4)}", f"t-{secrets.token_hex(4)}"
    package = package_from_zip(greeter_zip())
    summary = await store.install(mine, package)
    assert (summary.name, summary.file_count, summary.digest) == ("greeter", 2, package.digest)
    with pytest.raises(SkillExists):
        await store.install(mine, package)
    await store.install(theirs, package_from_zip(greeter_zip("other")))
    assert [s.name for s in await store.list(mine)] == ["greeter"]
    assert await store.list(mine, ["other", "greeter"]) == [summary]
    assert await store.list(mine, []) == []
    assert await store.get(mine, "other") is None  # the other tenant's
    stored = await store.get(mine, "greeter")
    assert stored is not None and stored.package == package
    newer = package_from_zip(make_zip([("SKILL.md", skill_md("greeter", "Greets, v2."), 0o100644)]))
    replaced = await store.install(mine, newer, replace=True)
    assert replaced.description == "Greets, v2." and replaced.digest != package.digest
    assert not await store.delete(mine, "other")
    assert await store.delete(mine, "greeter")
    assert await store.get(mine, "greeter") is None
    assert await store.get(theirs, "other") is not None


async def test_read_then_run_a_skill_script(
    sandbox: Sandbox, sessions: async_sessionmaker[AsyncSession]
) -> None:  # SPEC S-04 levels 2 and 3
    await SkillStore(sessions).install(sandbox.tenant, package_from_zip(greeter_zip()))
    allowed = ["greeter"]
    read = await sandbox.call("read_file", path="skill://greeter/SKILL.md", allowed_skills=allowed)
    assert read.success, read
    assert (
        read.output.startswith("---\nname: greeter")
        and "scripts/greet.sh (executable)" in read.output
    )
    assert "/skills/greeter ($WEFT_SKILL_DIR)" in read.output
    script = await sandbox.call(
        "read_file", path="skill://greeter/scripts/greet.sh", allowed_skills=allowed
    )
    assert script.success and "greetings from" in script.output, script
    ran = await sandbox.call(
        "shell_exec", skill_name="greeter", command='"$WEFT_SKILL_DIR/scripts/greet.sh" bob',
        env={"WEFT_SKILL_DIR": "/etc"}, allowed_skills=allowed,
    )  # fmt: skip
    assert ran.success and "greetings from /skills/greeter: bob" in ran.output, ran
    # Read-only: the command cannot change the installed package, and it stays out of the
    # workspace (and so out of its checkpoints).
    tamper = await sandbox.call(
        "shell_exec", skill_name="greeter", allowed_skills=allowed,
        command='echo x > "$WEFT_SKILL_DIR/SKILL.md"; echo rc=$?; ls /workspace; ls /skills',
    )  # fmt: skip
    assert "Read-only file system" in tamper.output and "rc=0" not in tamper.output, tamper.output
    assert "greet.sh" not in tamper.output
    again = await sandbox.call("read_file", path="skill://greeter/SKILL.md", allowed_skills=allowed)
    assert again.output == read.output
    # Without skill_name no skill is mounted.
    plain = await sandbox.call(
        "shell_exec", command="ls /skills 2>&1; echo ${WEFT_SKILL_DIR:-unset}"
    )
    assert "No such file" in plain.output and "unset" in plain.output, plain.output


async def test_a_missing_file_lists_the_package(
    sandbox: Sandbox, sessions: async_sessionmaker[AsyncSession]
) -> None:  # SPEC S-04 level 3: the model reads what it can ask for
    await SkillStore(sessions).install(sandbox.tenant, package_from_zip(greeter_zip()))
    done = await sandbox.call(
        "read_file", path="skill://greeter/nope.md", allowed_skills=["greeter"]
    )
    assert not done.success and "SKILL.md, scripts/greet.sh" in (done.error or ""), done
    await sandbox.still_serves()
