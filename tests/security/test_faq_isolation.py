"""FAQ entries and mentions under attack (SPEC C-04, A-09, A-11; issue 39): another
tenant's credential, a KB-restricted key, an entry addressed through the wrong base, and
hostile imports (a decompression bomb, a huge row, formulas, wrong columns) through the
public API and on knowledge's port directly as if a credential had leaked.

The victim is the stack's tenant with an FAQ base holding a secret answer."""

from __future__ import annotations

import io
import secrets
import zipfile
from collections.abc import AsyncIterator
from dataclasses import dataclass

import httpx
import pytest
from weft_testkit import LocalStack

from tests.security.test_knowledge_service_reach import request_credential
from tests.stack_fixtures import ApiKeys

SECRET = "The alarm code is 9-1-7-3."


@dataclass(frozen=True)
class Victim:
    tenant: str
    faq_kb: str
    other_faq_kb: str
    entry_id: str
    doc_id: str


@pytest.fixture
async def victim(api: httpx.AsyncClient, stack: LocalStack) -> Victim:
    made = await api.post("/api/v1/knowledge-bases", json={"name": "alarm", "kind": "faq"})
    assert made.status_code == 201 and made.json()["kind"] == "faq", made.text
    faq_kb = made.json()["id"]
    other = (await api.post("/api/v1/knowledge-bases", json={"name": "o", "kind": "faq"})).json()
    entry = await api.post(
        f"/api/v1/knowledge-bases/{faq_kb}/faq/entries",
        json={"question": "What is the alarm code?", "answer": SECRET},
    )
    assert entry.status_code == 201, entry.text
    docs = (await api.post("/api/v1/knowledge-bases", json={"name": "d"})).json()["id"]
    doc = await api.post(
        f"/api/v1/knowledge-bases/{docs}/documents",
        json={"title": "alarm", "content": "The alarm panel is by the door.", "tags": ["ops"]},
    )
    assert doc.status_code == 201, doc.text
    return Victim(stack.tenant, faq_kb, other["id"], entry.json()["id"], doc.json()["id"])


@pytest.fixture
async def knowledge(stack: LocalStack) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=stack.url("knowledge"), timeout=30) as client:
        yield client


async def test_another_tenant_reaches_no_faq_entry(
    stack: LocalStack, knowledge: httpx.AsyncClient, victim: Victim
) -> None:
    """The attacker's own tenant with the victim's ids: every entry route is the 404 of a
    missing base, search finds nothing, and naming the victim's tenant is 403."""
    attacker = f"attacker-{secrets.token_hex(3)}"
    as_attacker = request_credential(stack, attacker)
    mine = {"tenant_id": attacker}
    base = f"/internal/knowledge-bases/{victim.faq_kb}/faq"
    entry = f"{base}/entries/{victim.entry_id}"
    attempts = [
        knowledge.get(f"{base}/entries", params=mine, headers=as_attacker),
        knowledge.get(entry, params=mine, headers=as_attacker),
        knowledge.put(entry, json={**mine, "question": "q", "answer": "a"}, headers=as_attacker),
        knowledge.delete(entry, params=mine, headers=as_attacker),
        knowledge.post(
            f"{base}/entries", json={**mine, "question": "q", "answer": "a"}, headers=as_attacker
        ),
        knowledge.post(
            f"{base}/import",
            params={**mine, "file_name": "f.csv"},
            content=b"question,answer\nq,a\n",
            headers=as_attacker,
        ),
    ]
    for attempt in attempts:
        resp = await attempt
        assert resp.status_code == 404 and SECRET not in resp.text, resp.text
    search = await knowledge.post(
        "/internal/search",
        json={**mine, "knowledge_base_ids": [victim.faq_kb], "query": "alarm code"},
        headers=as_attacker,
    )
    assert search.status_code == 409 and SECRET not in search.text
    targets = await knowledge.post(
        "/internal/search-targets", json={**mine, "document_ids": [victim.doc_id]},
        headers=as_attacker,
    )  # fmt: skip
    assert targets.status_code == 404
    theirs = {"tenant_id": victim.tenant}
    named = await knowledge.get(entry, params=theirs, headers=as_attacker)
    assert named.status_code == 403 and SECRET not in named.text


async def test_a_kb_restricted_key_and_the_wrong_base_see_no_entry(
    api: httpx.AsyncClient, api_keys: ApiKeys, victim: Victim
) -> None:
    """SPEC A-09: a key limited to the other FAQ base gets 404 for the secret's base and
    its entries, and its searches and mentions never reach them; an entry addressed
    through another base of its own tenant is 404 too."""
    limited = (await api_keys.client(knowledge_base_ids=[victim.other_faq_kb])).http
    path = f"/api/v1/knowledge-bases/{victim.faq_kb}/faq/entries"
    assert (await limited.get(path)).status_code == 404
    assert (await limited.get(f"{path}/{victim.entry_id}")).status_code == 404
    assert (await limited.delete(f"{path}/{victim.entry_id}")).status_code == 404
    wrong_base = f"/api/v1/knowledge-bases/{victim.other_faq_kb}/faq/entries/{victim.entry_id}"
    for client in (api, limited):
        resp = await client.get(wrong_base)
        assert resp.status_code == 404 and SECRET not in resp.text
    mention = await limited.post(
        "/api/v1/knowledge-chat/ses_none",
        json={"query": "alarm?", "knowledge_base_ids": [victim.other_faq_kb],
              "mentions": [{"type": "doc", "value": victim.doc_id}]},
    )  # fmt: skip
    assert mention.status_code == 404, mention.text
    still = await api.get(f"{path}/{victim.entry_id}")
    assert still.status_code == 200 and still.json()["answer"] == SECRET


def _bomb() -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as bomb:
        bomb.writestr("[Content_Types].xml", "<Types/>")
        bomb.writestr("xl/worksheets/sheet1.xml", b"<row>" + b"0" * (60 * 1024 * 1024))
    return out.getvalue()


async def test_hostile_imports_are_refused_whole_and_formulas_stay_text(
    api: httpx.AsyncClient, victim: Victim
) -> None:
    url = f"/api/v1/knowledge-bases/{victim.other_faq_kb}/faq/import"
    before = (await api.get(f"/api/v1/knowledge-bases/{victim.other_faq_kb}/faq/entries")).json()
    refusals = [
        (("bomb.xlsx", _bomb()), 413, "zip bomb"),
        (("cols.csv", b"q,a\nx,y\n"), 422, "missing column(s) ['question', 'answer']"),
        (("row.csv", b"question,answer\nok?,yes\nbad?,\n"), 422, "row 3: column 'answer'"),
        (("huge.csv", b"question,answer\nq?," + b"z" * 30_000 + b"\n"), 422, "over the limit"),
        (("run.exe", b"MZ"), 415, "unsupported"),
        (("empty.csv", b""), 422, "empty"),
    ]
    for file, status, words in refusals:
        resp = await api.post(url, files={"file": file})
        assert resp.status_code == status and words in resp.json()["detail"], (file[0], resp.text)
    after = (await api.get(f"/api/v1/knowledge-bases/{victim.other_faq_kb}/faq/entries")).json()
    assert after["total"] == before["total"]  # nothing of a refused file landed

    formula = '=HYPERLINK("http://evil.example","x")'
    csv = f'question,answer\nLink?,"{formula.replace(chr(34), chr(34) * 2)}"\n'.encode()
    done = await api.post(url, files={"file": ("f.csv", csv)})
    assert done.status_code == 201 and done.json()["imported"] == 1, done.text
    listed = (await api.get(f"/api/v1/knowledge-bases/{victim.other_faq_kb}/faq/entries")).json()
    assert listed["items"][-1]["answer"] == formula


async def test_hostile_entry_and_mention_inputs_are_refused(
    api: httpx.AsyncClient, victim: Victim
) -> None:
    path = f"/api/v1/knowledge-bases/{victim.faq_kb}/faq/entries"
    too_long = await api.post(path, json={"question": "q" * 1_001, "answer": "a"})
    assert too_long.status_code == 422
    many = await api.post(path, json={"question": "q", "answer": "a",
                                      "similar_questions": ["s"] * 21})  # fmt: skip
    assert many.status_code == 422
    assert (await api.get(f"{path}/..%2F..%2Fetc")).status_code == 404
    assert (await api.get(path, params={"page_size": 1000})).status_code == 422
    bad_tag = await api.put(
        f"/api/v1/knowledge-bases/{victim.faq_kb}/documents/{victim.doc_id}/tags",
        json={"tags": ["a b"]},
    )
    assert bad_tag.status_code in (404, 422)  # the document is not in that base: 404 first
    session = (await api.post("/api/v1/sessions", json={})).json()["id"]
    for mentions in ([{"type": "file", "value": "x"}], [{"type": "tag", "value": "../x y"}]):
        resp = await api.post(f"/api/v1/knowledge-chat/{session}",
                              json={"query": "q", "mentions": mentions})  # fmt: skip
        assert resp.status_code == 422, resp.text
    unknown = await api.post(f"/api/v1/knowledge-chat/{session}",
                             json={"query": "q @doc:doc_does_not_exist"})  # fmt: skip
    assert unknown.status_code == 404 and "doc_does_not_exist" in unknown.text
    untagged = await api.post(f"/api/v1/knowledge-chat/{session}",
                              json={"query": "q @tag:nobody-uses-this"})  # fmt: skip
    assert untagged.status_code == 422 and "nobody-uses-this" in untagged.text
