"""Hostile input against a KB's switches and an upload's session (SPEC T-18, T-10,
invariant 5, A-09): ``PATCH /api/v1/knowledge-bases/{id}`` and its internal twin, and the
``session_id`` an upload names for its progress notices.

Another tenant's KB is the 404 of a missing one and stays as it was; a KB-restricted key
changes no switch (the work spends the whole tenant's budget); bodies that are not two
booleans are 422; an FAQ base gets no wiki or graph. An upload naming another user's or
another tenant's session is 404 before anything is queued or metered, so nobody writes
progress into a stream that is not theirs; a malformed session id is 422 at the gateway
and at knowledge."""

from __future__ import annotations

import secrets

import httpx
import pytest
from weft_testkit import LocalStack

from tests.stack_fixtures import ApiKeys


def _bearer(stack: LocalStack, tenant: str, kbs: list[str] | None = None) -> dict[str, str]:
    token = stack.credentials.gateway.request(
        tenant_id=tenant, user_id="u-x", audience=["knowledge"], ttl_s=300,
        knowledge_base_ids=kbs,
    )  # fmt: skip
    return {"Authorization": f"Bearer {token}"}


async def _kb(api: httpx.AsyncClient, **body: object) -> str:
    created = await api.post("/api/v1/knowledge-bases", json={"name": "kb", **body})
    assert created.status_code == 201, created.text
    kb_id: str = created.json()["id"]
    return kb_id


async def _switches(api: httpx.AsyncClient, kb_id: str) -> tuple[bool, bool]:
    view = (await api.get(f"/api/v1/knowledge-bases/{kb_id}")).json()
    return view["wiki_enabled"], view["graph_enabled"]


async def test_switches_of_another_tenant_or_a_restricted_key_stay_as_they_were(
    api: httpx.AsyncClient, api_keys: ApiKeys, stack: LocalStack
) -> None:
    kb_id = await _kb(api)
    attacker = await api_keys.client(tenant=f"attacker-{secrets.token_hex(3)}")
    resp = await attacker.http.patch(
        f"/api/v1/knowledge-bases/{kb_id}", json={"wiki_enabled": True}
    )
    assert resp.status_code == 404, resp.text
    restricted = await api_keys.client(knowledge_base_ids=[kb_id])
    resp = await restricted.http.patch(
        f"/api/v1/knowledge-bases/{kb_id}", json={"graph_enabled": True}
    )
    assert resp.status_code == 403, resp.text
    assert await _switches(api, kb_id) == (False, False)

    # knowledge's own route, as if another tenant's credential had leaked to its port.
    async with httpx.AsyncClient(base_url=stack.url("knowledge"), timeout=30) as knowledge:
        other = f"attacker-{secrets.token_hex(3)}"
        path = f"/internal/knowledge-bases/{kb_id}"
        naming_victim = await knowledge.patch(
            path, json={"tenant_id": stack.tenant, "wiki_enabled": True},
            headers=_bearer(stack, other),
        )  # fmt: skip
        assert naming_victim.status_code == 403, naming_victim.text
        own_tenant = await knowledge.patch(
            path, json={"tenant_id": other, "wiki_enabled": True}, headers=_bearer(stack, other)
        )
        assert own_tenant.status_code == 404, own_tenant.text
        restricted_credential = await knowledge.patch(
            path, json={"tenant_id": stack.tenant, "wiki_enabled": True},
            headers=_bearer(stack, stack.tenant, [kb_id]),
        )  # fmt: skip
        assert restricted_credential.status_code == 403, restricted_credential.text
        negative = await knowledge.patch(
            path, json={"tenant_id": stack.tenant, "wiki_enabled": True,
                        "budget_tokens_per_day": -1}, headers=_bearer(stack, stack.tenant),
        )  # fmt: skip
        assert negative.status_code == 422, negative.text
    assert await _switches(api, kb_id) == (False, False)


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"wiki_enabled": None},
        {"wiki_enabled": "yes"},
        {"graph_enabled": 1},
        {"wiki_enabled": True, "tenant_id": "someone-else"},
        {"wiki_enabled": True, "kind": "faq"},
        {"wiki_enabled": True, "budget_tokens_per_day": 0},
    ],
)
async def test_a_body_that_is_not_the_switches_is_422(
    api: httpx.AsyncClient, body: dict[str, object]
) -> None:
    kb_id = await _kb(api)
    resp = await api.patch(f"/api/v1/knowledge-bases/{kb_id}", json=body)
    assert resp.status_code == 422, resp.text
    assert await _switches(api, kb_id) == (False, False)


async def test_an_faq_base_gets_no_wiki_or_graph(api: httpx.AsyncClient) -> None:
    kb_id = await _kb(api, kind="faq")
    for switch in ("wiki_enabled", "graph_enabled"):
        resp = await api.patch(f"/api/v1/knowledge-bases/{kb_id}", json={switch: True})
        assert resp.status_code == 409, resp.text
    assert await _switches(api, kb_id) == (False, False)


async def test_an_upload_names_only_the_callers_own_session(
    api: httpx.AsyncClient, api_keys: ApiKeys
) -> None:
    kb_id = await _kb(api)
    colleague = await api_keys.client(user=f"colleague-{secrets.token_hex(3)}")
    theirs = (await colleague.http.post("/api/v1/sessions", json={})).json()["id"]
    stranger = await api_keys.client(tenant=f"other-{secrets.token_hex(3)}")
    foreign = (await stranger.http.post("/api/v1/sessions", json={})).json()["id"]
    docs = f"/api/v1/knowledge-bases/{kb_id}/documents"
    for session_id in (theirs, foreign, "s-never-created"):
        text = await api.post(docs, json={"title": "t", "content": "c", "session_id": session_id})
        assert text.status_code == 404, text.text
        upload = await api.post(
            f"/api/v1/knowledge-bases/{kb_id}/files", files={"file": ("a.md", b"# a")},
            data={"session_id": session_id},
        )  # fmt: skip
        assert upload.status_code == 404, upload.text
    listed = (await api.get(docs)).json()
    assert listed["total"] == 0, "a refused upload was queued"

    mine = (await api.post("/api/v1/sessions", json={})).json()["id"]
    ok = await api.post(docs, json={"title": "t", "content": "c", "session_id": mine})
    assert ok.status_code == 201, ok.text


@pytest.mark.parametrize("session_id", ["", "../../sessions/x", "a/b", "s" * 129, "s\n", 7])
async def test_a_malformed_session_id_is_422(api: httpx.AsyncClient, session_id: object) -> None:
    kb_id = await _kb(api)
    docs = f"/api/v1/knowledge-bases/{kb_id}/documents"
    text = await api.post(docs, json={"title": "t", "content": "c", "session_id": session_id})
    assert text.status_code == 422, text.text
    if isinstance(session_id, str) and session_id:
        upload = await api.post(
            f"/api/v1/knowledge-bases/{kb_id}/files", files={"file": ("a.md", b"# a")},
            data={"session_id": session_id},
        )  # fmt: skip
        assert upload.status_code == 422, upload.text
    assert (await api.get(docs)).json()["total"] == 0


async def test_knowledge_refuses_a_malformed_origin_itself(stack: LocalStack) -> None:
    """A caller past the gateway (a leaked credential) cannot store a path-like session or
    a negative budget on a document either."""
    headers = _bearer(stack, stack.tenant)
    async with (
        httpx.AsyncClient(base_url=stack.gateway_url, timeout=30,
                          headers={"Authorization": f"Bearer {stack.api_key}"}) as api,
        httpx.AsyncClient(base_url=stack.url("knowledge"), timeout=30) as knowledge,
    ):  # fmt: skip
        kb_id = await _kb(api)
        files = f"/internal/knowledge-bases/{kb_id}/files"
        base = {"tenant_id": stack.tenant, "file_name": "a.md"}
        for bad in ({"session_id": "../x"}, {"budget_tokens_per_minute": -5}):
            resp = await knowledge.post(files, params={**base, **bad}, content=b"# a",
                                        headers=headers)  # fmt: skip
            assert resp.status_code == 422, resp.text
        text = await knowledge.post(
            f"/internal/knowledge-bases/{kb_id}/documents", headers=headers,
            json={"tenant_id": stack.tenant, "title": "t", "content": "c", "session_id": "a b"},
        )  # fmt: skip
        assert text.status_code == 422, text.text
