"""The built-in skill installer's tools in the real sandbox (SPEC S-04): write_skill_file
and edit_skill_file build the skill in the session's draft folder, validate it after each
call and install it in the tenant's skills once valid; nothing outside the draft folder,
no other agent, no other skill of the tenant."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from weft_agent_config.tool_policy import runtime_tools
from weft_contracts.skill_packages import package_from_zip
from weft_storage.agent_config.skills import SkillStore
from weft_tool_catalog.sandbox_specs import SKILL_INSTALLER_AGENT

from tests.integration.sandbox_kit import DECOY, SENTINEL, Sandbox, decoy, open_sandbox
from tests.skill_kit import GREETER_SCRIPT, greeter_zip, skill_md

INSTALLER = SKILL_INSTALLER_AGENT


@pytest.fixture
async def sandbox(
    sessions: async_sessionmaker[AsyncSession], redis: Redis
) -> AsyncIterator[Sandbox]:
    async with open_sandbox(sessions, redis) as running:
        yield running


async def test_the_installer_writes_validates_and_installs(
    sandbox: Sandbox, sessions: async_sessionmaker[AsyncSession]
) -> None:  # SPEC S-04
    store = SkillStore(sessions)
    script = await sandbox.call(
        "write_skill_file", agent_id=INSTALLER, path="scripts/greet.sh",
        content=GREETER_SCRIPT.decode(), executable=True,
    )  # fmt: skip
    assert script.success and "not installed yet" in script.output, script
    assert "no SKILL.md" in script.output and await store.list(sandbox.tenant) == []
    wrote = await sandbox.call(
        "write_skill_file", agent_id=INSTALLER, path="SKILL.md", content=skill_md("made").decode()
    )
    assert wrote.success and "installed skill 'made' (2 files)" in wrote.output, wrote
    stored = await store.get(sandbox.tenant, "made")
    assert stored is not None
    greet = stored.package.file("scripts/greet.sh")
    assert greet is not None and greet.executable
    edited = await sandbox.call(
        "edit_skill_file", agent_id=INSTALLER, path="SKILL.md",
        old_string="Greets people by name.", new_string="Greets everyone.",
    )  # fmt: skip
    assert edited.success and "installed skill 'made'" in edited.output, edited
    again = await store.get(sandbox.tenant, "made")
    assert again is not None and again.summary.description == "Greets everyone."
    # The installed skill is usable by an agent that selects it.
    ran = await sandbox.call(
        "shell_exec", skill_name="made", command='"$WEFT_SKILL_DIR/scripts/greet.sh" x',
        allowed_skills=["made"],
    )  # fmt: skip
    assert ran.success and "greetings from /skills/made: x" in ran.output, ran


async def test_a_bad_draft_is_reported_and_not_installed(
    sandbox: Sandbox, sessions: async_sessionmaker[AsyncSession]
) -> None:  # SPEC S-04: the model reads why
    done = await sandbox.call(
        "write_skill_file", agent_id=INSTALLER, path="SKILL.md", content="no frontmatter"
    )
    assert done.success and "frontmatter" in done.output and not done.data["installed"], done
    assert await SkillStore(sessions).list(sandbox.tenant) == []


def test_only_the_installer_is_offered_the_tools() -> None:  # SPEC S-04
    tools = ["shell_exec", "read_file", "write_skill_file", "edit_skill_file"]
    plain = runtime_tools(tools, has_kb_scope=False, web_search=False, memory=False, sandbox=True)
    assert plain == ["shell_exec", "read_file"]
    installer = runtime_tools(
        tools, has_kb_scope=False, web_search=False, memory=False, sandbox=True,
        skill_installer=True,
    )  # fmt: skip
    assert installer == tools


async def test_another_agent_cannot_write_a_skill(
    sandbox: Sandbox, sessions: async_sessionmaker[AsyncSession]
) -> None:  # SPEC S-04: the second guard, behind agent-config's
    done = await sandbox.call(
        "write_skill_file", agent_id="custom-agent", path="SKILL.md", content=skill_md("x").decode()
    )
    assert not done.success and "reserved to the built-in skill installer" in (done.error or "")
    assert await SkillStore(sessions).list(sandbox.tenant) == []
    await sandbox.still_serves()


@pytest.mark.parametrize(
    "path",
    ["../escape.sh", f"{DECOY}/cron.d/x", "/workspace/output/x", "scripts/../../x", "a\\..\\b",
     "/workspace/skill-draft/../x"],
)  # fmt: skip
async def test_the_installer_writes_only_inside_the_draft(sandbox: Sandbox, path: str) -> None:
    done = await sandbox.call("write_skill_file", agent_id=INSTALLER, path=path, content="x")
    assert not done.success, done
    listing = await sandbox.call(
        "shell_exec", command="find /workspace -name 'x' -o -name 'escape.sh'"
    )
    assert listing.output.split("stdout:\n")[1].startswith("\nstderr"), listing.output
    await sandbox.still_serves()


async def test_a_planted_symlink_fails_validation(
    sandbox: Sandbox, sessions: async_sessionmaker[AsyncSession]
) -> None:  # SPEC S-04: a command may not smuggle a host file into a package
    target = decoy("passwd")  # never the host's file: a broken guard would write it
    planted = await sandbox.call(
        "shell_exec", command=f"mkdir -p skill-draft && ln -s {target} skill-draft/passwd"
    )
    assert planted.success, planted
    done = await sandbox.call(
        "write_skill_file", agent_id=INSTALLER, path="SKILL.md", content=skill_md("sly").decode()
    )
    assert done.success and "symlink" in done.output and not done.data["installed"], done
    assert await SkillStore(sessions).get(sandbox.tenant, "sly") is None
    through = await sandbox.call(
        "write_skill_file", agent_id=INSTALLER, path="passwd", content="overwrite"
    )
    assert not through.success, through  # the path check refuses a link leading out
    assert target.read_text() == SENTINEL


async def test_the_installer_never_replaces_another_skill(
    sandbox: Sandbox, sessions: async_sessionmaker[AsyncSession]
) -> None:  # SPEC S-04: only the skill being installed
    store = SkillStore(sessions)
    uploaded = await store.install(sandbox.tenant, package_from_zip(greeter_zip("taken")))
    done = await sandbox.call(
        "write_skill_file", agent_id=INSTALLER, path="SKILL.md", content=skill_md("taken").decode()
    )
    assert not done.success and "did not create" in (done.error or ""), done
    kept = await store.get(sandbox.tenant, "taken")
    assert kept is not None and kept.summary.digest == uploaded.digest
    other_session = await sandbox.call(
        "write_skill_file", session="session-two", agent_id=INSTALLER, path="SKILL.md",
        content=skill_md("fresh").decode(),
    )  # fmt: skip
    assert other_session.success and "installed skill 'fresh'" in other_session.output
    # This session's draft names 'fresh' now, but another session installed it.
    mine = await sandbox.call(
        "edit_skill_file", agent_id=INSTALLER, path="SKILL.md",
        old_string="name: taken", new_string="name: fresh",
    )  # fmt: skip
    assert not mine.success and "did not create" in (mine.error or ""), mine
