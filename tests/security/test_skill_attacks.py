"""Hostile skill packages and skill calls (SPEC S-04): a bad package is refused with its
reason (422, 413 when too big), never half-installed; another tenant's skill is "not
found" wherever its name is used (install, read, run, delete); a skill the agent does not
select cannot be read or run, even by a model that knows its name."""

from __future__ import annotations

import base64
import secrets
import stat
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from redis.asyncio import Redis
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from weft_contracts.skill_packages import MAX_ARCHIVE_BYTES, MAX_FILES, package_from_zip
from weft_storage.agent_config.skills import SkillStore
from weft_testkit import LocalStack, read_turn

from tests.integration.sandbox_kit import Sandbox, open_sandbox
from tests.skill_kit import greeter_zip, make_zip, skill_md, symlink_zip
from tests.stack_fixtures import ApiKeys

REG = stat.S_IFREG | 0o644
ZIP = {"Content-Type": "application/zip"}


def _unique(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(3)}"


@pytest.fixture
async def sandbox(
    sessions: async_sessionmaker[AsyncSession], redis: Redis
) -> AsyncIterator[Sandbox]:
    async with open_sandbox(sessions, redis) as running:
        yield running


@pytest.mark.parametrize(
    ("package", "status", "reason"),
    [
        (make_zip([("SKILL.md", skill_md("slip"), REG), ("../../etc/cron.d/x", b"x", REG)]),
         422, "leaves the package"),
        (make_zip([("SKILL.md", skill_md("abs"), REG), ("/etc/passwd", b"x", REG)]),
         422, "absolute"),
        (symlink_zip(), 422, "symlink"),
        (make_zip([("SKILL.md", b"---\nname: Not A Slug\ndescription: d\n---\n", REG)]),
         422, "slug"),
        (make_zip([("SKILL.md", b"no frontmatter", REG)]), 422, "frontmatter"),
        (make_zip([("README.md", b"x", REG)]), 422, "no SKILL.md"),
        (b"not a zip at all", 422, "not a valid zip"),
        (make_zip([("SKILL.md", skill_md("many"), REG)]
                  + [(f"f{i}", b"", REG) for i in range(MAX_FILES)]), 413, "more than"),
        (b"PK" + b"\0" * MAX_ARCHIVE_BYTES, 413, "larger than"),
    ],
)  # fmt: skip
async def test_a_bad_package_is_refused_with_its_reason(
    api: httpx.AsyncClient, package: bytes, status: int, reason: str
) -> None:  # SPEC S-04
    before = {s["name"] for s in (await api.get("/api/v1/skills")).json()}
    resp = await api.post("/api/v1/skills", content=package, headers=ZIP)
    assert resp.status_code == status, resp.text
    assert reason in resp.json()["detail"], resp.text
    assert {s["name"] for s in (await api.get("/api/v1/skills")).json()} == before


@pytest.mark.parametrize(
    ("body", "status", "reason"),
    [
        ({"files": [{"path": "SKILL.md", "content": "@@@", "encoding": "base64"}]}, 422,
         "base64"),
        ({"files": [{"path": "SKILL.md", "content": skill_md("j").decode()},
                    {"path": "a/../../b", "content": "x"}]}, 422, "leaves the package"),
        ({"files": []}, 422, "files"),
        ({"nope": 1}, 422, "files"),
        ([1, 2], 422, "files"),
    ],
)  # fmt: skip
async def test_a_bad_json_package_is_refused(
    api: httpx.AsyncClient, body: Any, status: int, reason: str
) -> None:  # SPEC S-04
    resp = await api.post("/api/v1/skills", json=body)
    assert resp.status_code == status and reason in resp.text, resp.text
    text = await api.post("/api/v1/skills", content=b"{", headers={"Content-Type": "text/x"})
    assert text.status_code == 415, text.text
    broken = await api.post(
        "/api/v1/skills", content=b"{", headers={"Content-Type": "application/json"}
    )
    assert broken.status_code == 422, broken.text


async def test_a_json_package_installs_and_a_taken_name_is_409(api: httpx.AsyncClient) -> None:
    name = _unique("jsonskill")
    script = base64.b64encode(b"#!/bin/sh\necho hi\n").decode()
    body = {"files": [{"path": "SKILL.md", "content": skill_md(name).decode()},
                      {"path": "run.sh", "content": script, "encoding": "base64",
                       "executable": True}]}  # fmt: skip
    assert (await api.post("/api/v1/skills", json=body)).status_code == 201
    again = await api.post("/api/v1/skills", json=body)
    assert again.status_code == 409 and "replace=true" in again.text, again.text
    assert (await api.post("/api/v1/skills?replace=true", json=body)).status_code == 201
    for path in (
        "/api/v1/skills/..%2f..%2fetc",
        "/api/v1/skills/UPPER",
        f"/api/v1/skills/{'a' * 65}",
    ):
        assert (await api.get(path)).status_code in (404, 422), path
    assert (await api.delete(f"/api/v1/skills/{name}")).status_code == 204


async def test_another_tenants_skill_is_not_found_through_the_api(
    api: httpx.AsyncClient, api_keys: ApiKeys
) -> None:  # SPEC S-04, S-01
    other = (await api_keys.client(tenant=_unique("tenant-skills"), user="b")).http
    name = _unique("private")
    installed = await other.post("/api/v1/skills", content=greeter_zip(name), headers=ZIP)
    assert installed.status_code == 201, installed.text
    assert name not in [s["name"] for s in (await api.get("/api/v1/skills")).json()]
    got = await api.get(f"/api/v1/skills/{name}")
    assert got.status_code == 404 and got.json()["detail"] == f"skill {name!r} not found"
    assert (await api.delete(f"/api/v1/skills/{name}")).status_code == 404
    # The same name installs in this tenant as a skill of its own (no 409 that would
    # reveal the other's), and deleting it leaves the other tenant's in place.
    mine = await api.post("/api/v1/skills", content=greeter_zip(name), headers=ZIP)
    assert mine.status_code == 201, mine.text
    assert (await api.delete(f"/api/v1/skills/{name}")).status_code == 204
    assert (await other.get(f"/api/v1/skills/{name}")).status_code == 200


async def test_another_tenants_skill_is_not_found_in_the_sandbox(
    sandbox: Sandbox, sessions: async_sessionmaker[AsyncSession]
) -> None:  # SPEC S-04: even when the call's context names it
    owner = f"tenant-owner-{secrets.token_hex(4)}"  # a store that outlives runs: unique
    await SkillStore(sessions).install(owner, package_from_zip(greeter_zip("owned")))
    missing = await sandbox.call(
        "read_file", path="skill://nosuch/SKILL.md", allowed_skills=["nosuch"]
    )
    read = await sandbox.call("read_file", path="skill://owned/SKILL.md", allowed_skills=["owned"])
    assert not read.success and read.error == (missing.error or "").replace("nosuch", "owned")
    ran = await sandbox.call(
        "shell_exec", skill_name="owned", command="cat $WEFT_SKILL_DIR/SKILL.md",
        allowed_skills=["owned"],
    )  # fmt: skip
    assert not ran.success and "skill 'owned' not found" in (ran.error or ""), ran
    await sandbox.still_serves()


async def test_a_skill_the_agent_does_not_select_cannot_be_used(
    sandbox: Sandbox, sessions: async_sessionmaker[AsyncSession]
) -> None:  # SPEC S-04: allowed_skills is the allow-list, absent means none
    await SkillStore(sessions).install(sandbox.tenant, package_from_zip(greeter_zip("mine")))
    for allowed in (None, [], ["other"]):
        read = await sandbox.call("read_file", path="skill://mine/SKILL.md", allowed_skills=allowed)
        assert not read.success and "skill 'mine' not found" in (read.error or ""), read
        ran = await sandbox.call(
            "shell_exec", skill_name="mine", command="true", allowed_skills=allowed
        )
        assert not ran.success and "skill 'mine' not found" in (ran.error or ""), ran
    ok = await sandbox.call("read_file", path="skill://mine/SKILL.md", allowed_skills=["mine"])
    assert ok.success, ok


@pytest.mark.parametrize(
    "path",
    [
        "skill://mine/../../../../etc/passwd",
        "skill://mine/scripts/../../x",
        "skill://mine//etc/passwd",
        "skill://../mine/SKILL.md",
        "skill:///etc/passwd",
        "skill://mine/scripts\\..\\..\\x",
    ],
)
async def test_skill_uris_cannot_leave_the_package(
    sandbox: Sandbox, sessions: async_sessionmaker[AsyncSession], path: str
) -> None:  # SPEC S-04, S-02
    store = SkillStore(sessions)
    if await store.get(sandbox.tenant, "mine") is None:
        await store.install(sandbox.tenant, package_from_zip(greeter_zip("mine")))
    done = await sandbox.call("read_file", path=path, allowed_skills=["mine", ".."])
    assert not done.success, done
    assert "root:" not in (done.error or "") and "root:" not in done.output
    await sandbox.still_serves()


async def test_a_skill_not_selected_is_refused_in_a_real_turn(
    api: httpx.AsyncClient, stack: LocalStack, llm: httpx.AsyncClient
) -> None:  # SPEC S-04: the engine carries the agent's skills; a known name is not enough
    name = _unique("unselected")
    assert (await api.post("/api/v1/skills", content=greeter_zip(name), headers=ZIP)).is_success
    agent = await api.post(
        "/api/v1/agents",
        json={"name": "picky", "allowed_tools": ["read_file", "shell_exec"],
              "sandbox_enabled": True, "kb_selection_mode": "none",
              "skills_selection_mode": "selected", "selected_skills": []},
    )  # fmt: skip
    assert agent.status_code == 201, agent.text
    session = (await api.post("/api/v1/sessions", json={"agent_id": agent.json()["id"]})).json()
    marker = "SKILL-UNSELECTED"
    # Call ids unique to this test: a write call's claim is keyed by its id in the stack.
    read_id, run_id = f"call_read_{secrets.token_hex(3)}", f"call_run_{secrets.token_hex(3)}"
    script = {"steps": [
        {"match": marker, "tool_calls": [
            {"id": read_id, "name": "read_file",
             "arguments": {"path": f"skill://{name}/SKILL.md"}},
            {"id": run_id, "name": "shell_exec",
             "arguments": {"skill_name": name, "command": "ls $WEFT_SKILL_DIR"}}]},
        {"match": marker, "content": "refused"},
    ]}  # fmt: skip
    assert (await llm.post("/_script", json=script)).status_code == 200
    events = await read_turn(
        api, f"/api/v1/agent-chat/{session['id']}", api_key=stack.api_key,
        json_body={"query": marker}, timeout_s=240,
    )  # fmt: skip
    results = {
        e.data["data"]["call_id"]: e.data["data"] for e in events if e.event == "tool_result"
    }
    for call in (read_id, run_id):
        assert not results[call]["success"], results[call]
        assert f"skill {name!r} not found" in results[call]["error"], results[call]
    assert (await api.delete(f"/api/v1/skills/{name}")).status_code == 204
