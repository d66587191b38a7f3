"""agent-config's skill routes (``/internal/skills``), which the gateway's skill API
proxies to and the sandbox reads packages from (docs/skills.md), attacked on agent-config's
port directly, as a caller who reached the internal network would: no credential, another
tenant's credential, another session's, hostile names and bodies. Refusals are 4xx with a
reason, never a 500. The package a sandbox gets is the one agent-config finds from the
agent (a shared agent's owner's), never a tenant the request names."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator

import httpx
import pytest
from weft_testkit import LocalStack

from tests.e2e.test_tenants_isolation import register_key
from tests.skill_kit import greeter_zip

pytestmark = pytest.mark.kafka

ZIP = {"Content-Type": "application/zip"}


def _raw(stack: LocalStack) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=stack.url("agent_config"), timeout=30)


@pytest.fixture
async def owned(stack: LocalStack, api: httpx.AsyncClient) -> AsyncIterator[tuple[str, str]]:
    """A skill of the stack's tenant, and an agent of that tenant that may use it."""
    name = f"own-{secrets.token_hex(3)}"
    installed = await api.post("/api/v1/skills", content=greeter_zip(name), headers=ZIP)
    assert installed.status_code == 201, installed.text
    agent = await api.post(
        "/api/v1/agents",
        json={"name": "skilled", "model": "weft-scripted", "rerank_model_id": "rerank-x",
              "allowed_tools": ["read_file"], "sandbox_enabled": True,
              "kb_selection_mode": "none", "skills_selection_mode": "selected",
              "selected_skills": [name]},
    )  # fmt: skip
    assert agent.status_code == 201, agent.text
    yield name, agent.json()["id"]


@pytest.mark.parametrize(
    ("method", "path"),
    [("GET", ""), ("POST", ""), ("GET", "/x"), ("DELETE", "/x"), ("GET", "/x/package")],
)
async def test_no_or_another_tenants_credential_is_refused(
    stack: LocalStack, method: str, path: str
) -> None:
    params = {"tenant_id": stack.tenant, "agent_id": "a"}
    other = stack.credentials.headers(f"tenant-{secrets.token_hex(4)}", "dev")
    async with _raw(stack) as raw:
        nobody = await raw.request(method, f"/internal/skills{path}", params=params)
        foreign = await raw.request(method, f"/internal/skills{path}", params=params, headers=other)
    assert nobody.status_code == 401 and foreign.status_code == 403, (nobody.text, foreign.text)


async def test_another_tenant_sees_none_of_the_skill(
    stack: LocalStack, owned: tuple[str, str]
) -> None:
    name, agent_id = owned
    tenant = f"tenant-{secrets.token_hex(4)}"
    mine = {"tenant_id": tenant}
    async with _raw(stack) as raw:
        headers = stack.credentials.headers(tenant, "dev")
        got = await raw.get(f"/internal/skills/{name}", params=mine, headers=headers)
        pkg = await raw.get(
            f"/internal/skills/{name}/package", params={**mine, "agent_id": agent_id},
            headers=headers,
        )  # fmt: skip
        gone = await raw.delete(f"/internal/skills/{name}", params=mine, headers=headers)
        listed = await raw.get("/internal/skills", params=mine, headers=headers)
    assert got.status_code == pkg.status_code == gone.status_code == 404, (got, pkg, gone)
    assert listed.status_code == 200 and listed.json() == []


async def test_the_package_is_only_the_agent_s_to_use(
    stack: LocalStack, api: httpx.AsyncClient, owned: tuple[str, str]
) -> None:
    name, agent_id = owned
    plain = await api.post(
        "/api/v1/agents",
        json={"name": "plain", "kb_selection_mode": "none", "skills_selection_mode": "none"},
    )
    assert plain.status_code == 201, plain.text
    params = {"tenant_id": stack.tenant}
    headers = stack.credentials.headers(stack.tenant, "dev")
    async with _raw(stack) as raw:
        ok = await raw.get(
            f"/internal/skills/{name}/package", params={**params, "agent_id": agent_id},
            headers=headers,
        )  # fmt: skip
        refused = [
            await raw.get(f"/internal/skills/{name}/package", params={**params, "agent_id": a},
                          headers=headers)
            for a in (plain.json()["id"], "agt_nosuch")
        ]  # fmt: skip
    assert ok.status_code == 200 and ok.json()["name"] == name, ok.text
    assert {f["path"] for f in ok.json()["files"]} >= {"SKILL.md"}
    assert [r.status_code for r in refused] == [404, 404], [r.text for r in refused]


@pytest.mark.parametrize(
    ("path", "params"),
    [
        ("/..%2F..%2Fetc", {}),
        ("/UPPER", {}),
        ("/" + "a" * 65, {}),
        ("/ok/package", {"agent_id": ""}),
        ("/ok/package", {"agent_id": "a" * 129}),
        ("/ok/package", {}),
    ],
    ids=["traversal", "upper", "long-name", "empty-agent", "long-agent", "no-agent"],
)
async def test_hostile_names_are_422(stack: LocalStack, path: str, params: dict[str, str]) -> None:
    headers = stack.credentials.headers(stack.tenant, "dev")
    async with _raw(stack) as raw:
        answer = await raw.get(
            f"/internal/skills{path}", params={"tenant_id": stack.tenant, **params},
            headers=headers,
        )  # fmt: skip
    assert answer.status_code in (404, 422), answer.text
    if path != "/..%2F..%2Fetc":  # the router may not match an encoded slash at all
        assert answer.status_code == 422, answer.text


@pytest.mark.parametrize(
    ("body", "kind", "status"),
    [
        (b"not a zip", "application/zip", 422),
        (b'{"files": "x"}', "application/json", 422),
        (b"{", "application/json", 422),
        (b"<skill/>", "text/xml", 415),
        (b"PK" + b"\0" * (4 * 1024 * 1024), "application/zip", 413),
    ],
    ids=["garbage-zip", "files-string", "broken-json", "xml", "oversize"],
)
async def test_hostile_uploads_are_refused_with_the_reason(
    stack: LocalStack, body: bytes, kind: str, status: int
) -> None:
    headers = {**stack.credentials.headers(stack.tenant, "dev"), "Content-Type": kind}
    async with _raw(stack) as raw:
        answer = await raw.post(
            "/internal/skills", params={"tenant_id": stack.tenant}, content=body, headers=headers
        )
    assert answer.status_code == status and answer.json()["detail"], answer.text


async def test_an_installer_session_needs_that_session_s_credential(stack: LocalStack) -> None:
    """Replacing "what this session installed" is the skill installer's: a turn credential
    of another session is refused."""
    session = f"ses_{secrets.token_hex(4)}"
    params = {"tenant_id": stack.tenant, "session_id": session}
    another = stack.credentials.headers(stack.tenant, "dev", session_id="ses_other")
    async with _raw(stack) as raw:
        refused = await raw.post(
            "/internal/skills", params=params, content=greeter_zip("x-inst"),
            headers={**another, **ZIP},
        )  # fmt: skip
    assert refused.status_code == 403, refused.text


async def test_a_shared_agent_reads_its_owner_s_package_and_nothing_else(
    stack: LocalStack, api: httpx.AsyncClient, infra: dict[str, str], owned: tuple[str, str]
) -> None:
    name, agent_id = owned
    recipient, key = f"tenant-r-{secrets.token_hex(4)}", f"key-{secrets.token_hex(16)}"
    await register_key(infra["WEFT_DATABASE_URL"], recipient, key)
    async with stack.internal_client("agent_config") as internal:
        org = (await internal.post("/internal/organisations", json={"name": "acme"})).json()
        for tenant, role in ((stack.tenant, "editor"), (recipient, "viewer")):
            joined = await internal.put(
                f"/internal/organisations/{org['id']}/members/{tenant}", json={"role": role}
            )
            assert joined.status_code == 200, joined.text
    shared = await api.post(
        f"/api/v1/agents/{agent_id}/shares", json={"organisation_id": org["id"]}
    )
    assert shared.status_code in (200, 201), shared.text
    headers = stack.credentials.headers(recipient, "dev")
    async with _raw(stack) as raw:
        theirs = await raw.get(
            f"/internal/skills/{name}/package",
            params={"tenant_id": recipient, "agent_id": agent_id}, headers=headers,
        )  # fmt: skip
        named_owner = await raw.get(
            f"/internal/skills/{name}/package",
            params={"tenant_id": stack.tenant, "agent_id": agent_id}, headers=headers,
        )  # fmt: skip
        direct = await raw.get(
            f"/internal/skills/{name}", params={"tenant_id": recipient}, headers=headers
        )
    assert theirs.status_code == 200 and theirs.json()["name"] == name, theirs.text
    assert named_owner.status_code == 403, named_owner.text
    assert direct.status_code == 404, direct.text
