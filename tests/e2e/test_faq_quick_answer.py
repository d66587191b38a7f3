"""FAQ quick answers and mentions through the public API with the scripted model (SPEC
C-04, A-11; issue 39's proof): a quick-answer turn whose FAQ entry matches above the
threshold answers with that entry and makes no model call; one below it falls through to
its one generation; an ``@doc`` mention (or ``@tag``) limits the search to that document.
"""

from __future__ import annotations

from typing import Any

import httpx
from weft_testkit import LocalStack, chat_requests, read_turn

ANSWER = "Use the reset link on the sign-in page; it expires after 15 minutes."
FAQ_CSV = (
    "question,answer,similar_questions\n"
    f'How do I reset my password?,"{ANSWER}",forgot password|lost password\n'
    "What are the support hours?,Support answers from 8am to 6pm CET.,\n"
).encode()


async def _quick_agent(api: httpx.AsyncClient, kb_ids: list[str], **fields: Any) -> str:
    body = {
        "name": "faq desk", "mode": "quick-answer", "allowed_tools": ["search_knowledge"],
        "kb_selection_mode": "selected", "knowledge_base_ids": kb_ids,
        "faq_priority_enabled": True, "faq_direct_answer_threshold": 0.9,
        "faq_score_boost": 0.1, **fields,
    }  # fmt: skip
    resp = await api.post("/api/v1/agents", json=body)
    assert resp.status_code == 201, resp.text
    agent_id: str = resp.json()["id"]
    return agent_id


async def _turn(
    api: httpx.AsyncClient, stack: LocalStack, agent_id: str, query: str, **body: Any
) -> list[Any]:
    session = (await api.post("/api/v1/sessions", json={"agent_id": agent_id})).json()["id"]
    events = await read_turn(
        api, f"/api/v1/knowledge-chat/{session}", api_key=stack.api_key,
        json_body={"query": query, **body},
    )  # fmt: skip
    assert events[-1].event == "complete", events[-1].data
    errors = [e.data["data"] for e in events if e.event == "error"]
    assert events[-1].data["data"]["status"] == "completed", (events[-1].data["data"], errors)
    return events


async def test_an_faq_entry_above_the_threshold_answers_without_a_generation(
    api: httpx.AsyncClient, stack: LocalStack, llm: httpx.AsyncClient
) -> None:
    kb = (await api.post("/api/v1/knowledge-bases", json={"name": "faq", "kind": "faq"})).json()
    imported = await api.post(
        f"/api/v1/knowledge-bases/{kb['id']}/faq/import", files={"file": ("faq.csv", FAQ_CSV)}
    )
    assert imported.status_code == 201 and imported.json()["imported"] == 2, imported.text
    agent = await _quick_agent(api, [kb["id"]])

    events = await _turn(api, stack, agent, "I forgot password")
    assert events[-1].data["data"]["final_answer"] == ANSWER
    assert any(e.event == "tool_result" for e in events)  # the engine's own search ran
    assert await chat_requests(llm) == []  # no generation, no rewrite: no model call

    # Below the threshold: the entry is context, the one generation answers.
    events = await _turn(api, stack, agent, "password rules for contractors")
    sent = await chat_requests(llm)
    assert len(sent) == 1
    assert ANSWER in str(sent[0]["messages"])  # the FAQ entry reached the generation
    assert events[-1].data["data"]["final_answer"] != ANSWER


async def test_a_doc_mention_limits_the_search_to_that_document(
    api: httpx.AsyncClient, stack: LocalStack, llm: httpx.AsyncClient
) -> None:
    kb = (await api.post("/api/v1/knowledge-bases", json={"name": "plans"})).json()["id"]
    ids = {}
    for name, text, tags in (
        ("basic", "The basic plan costs 10 euros per month.", []),
        ("pro", "The pro plan costs 30 euros per month.", ["premium"]),
    ):
        added = await api.post(f"/api/v1/knowledge-bases/{kb}/documents",
                               json={"title": name, "content": text, "tags": tags})  # fmt: skip
        assert added.status_code == 201, added.text
        ids[name] = added.json()["id"]
    agent = await _quick_agent(api, [kb], faq_priority_enabled=False)

    def searched_documents(events: list[Any]) -> set[str]:
        refs = [e for e in events if e.event == "references"]
        return {r["document_id"] for e in refs for r in e.data["data"]["references"]}

    events = await _turn(api, stack, agent, "plan costs euros per month")
    assert searched_documents(events) == {ids["basic"], ids["pro"]}
    mention = [{"type": "doc", "value": ids["basic"]}]
    events = await _turn(api, stack, agent, "plan costs euros per month", mentions=mention)
    assert searched_documents(events) == {ids["basic"]}
    events = await _turn(api, stack, agent, "@tag:premium plan costs euros per month")
    assert searched_documents(events) == {ids["pro"]}


async def test_intent_detection_and_expansion_through_the_scripted_model(
    api: httpx.AsyncClient, stack: LocalStack, llm: httpx.AsyncClient
) -> None:
    """SPEC C-04: the analysis call's variants are searched beside the question (in the
    same round); a message the model calls chat skips retrieval and is answered by the
    one generation (the closing generation's last message is the engine's own request to
    answer from the retrieved passages: its steps match that)."""
    kb = (await api.post("/api/v1/knowledge-bases", json={"name": "faq", "kind": "faq"})).json()
    await api.post(
        f"/api/v1/knowledge-bases/{kb['id']}/faq/import", files={"file": ("faq.csv", FAQ_CSV)}
    )
    agent = await _quick_agent(
        api, [kb["id"]], faq_priority_enabled=False, intent_detection_enabled=True,
        query_expansion_enabled=True,
    )  # fmt: skip
    await llm.post("/_script", json={"steps": [
        {"match": "EXPAND", "content": '{"intent": "knowledge", "variants": ["lost password"]}'},
        {"match": "retrieved passages", "content": "Follow the reset link."},
        {"match": "HELLO", "content": '{"intent": "chat", "variants": []}'},
        {"match": "retrieved passages", "content": "Hello! How can I help?"},
    ]})  # fmt: skip

    events = await _turn(api, stack, agent, "EXPAND how do I get back into my account")
    calls = [e.data["data"] for e in events if e.event == "tool_call"]
    assert len(calls) == 2 and "lost password" in str(calls[1]), calls
    assert len([e for e in events if e.event == "tool_result"]) == 2
    assert events[-1].data["data"]["final_answer"] == "Follow the reset link."

    events = await _turn(api, stack, agent, "HELLO there")
    assert not [e for e in events if e.event in ("tool_call", "tool_result")]
    assert events[-1].data["data"]["final_answer"] == "Hello! How can I help?"
    assert len(await chat_requests(llm)) == 4  # two analyses, two generations


TAGGED_FAQ_CSV = (
    b"question,answer,tag\n"
    b"How do I reset my password?,Use the reset link.,account\n"
    b"What are the support hours?,Support answers from 8am to 6pm CET.,support\n"
)


async def test_an_at_tag_mention_selects_the_faq_entries_carrying_it(
    api: httpx.AsyncClient, stack: LocalStack, llm: httpx.AsyncClient
) -> None:
    """SPEC A-11 over FAQ bases: ``@tag:support`` reads the FAQ entries tagged ``support``
    and no document nor other entry; the import's embeddings are computed by the stack's
    ingestion worker (progress on the KB) and metered."""
    faq = (await api.post("/api/v1/knowledge-bases", json={"name": "faq", "kind": "faq"})).json()
    imported = await api.post(
        f"/api/v1/knowledge-bases/{faq['id']}/faq/import",
        files={"file": ("faq.csv", TAGGED_FAQ_CSV)},
    )
    assert imported.status_code == 201 and imported.json()["embedding_job"], imported.text
    docs = (await api.post("/api/v1/knowledge-bases", json={"name": "hours"})).json()["id"]
    hours = {"title": "hours", "content": "Support hours are 9 to 5."}
    added = await api.post(f"/api/v1/knowledge-bases/{docs}/documents", json=hours)
    assert added.status_code == 201, added.text
    agent = await _quick_agent(api, [faq["id"], docs], faq_priority_enabled=False)

    def referenced(events: list[Any]) -> list[dict[str, Any]]:
        refs = [e for e in events if e.event == "references"]
        return [r for e in refs for r in e.data["data"]["references"]]

    events = await _turn(api, stack, agent, "@tag:support support hours password")
    refs = referenced(events)
    assert refs and all("Support answers" in r["excerpt"] for r in refs), refs
    everything = referenced(await _turn(api, stack, agent, "support hours password"))
    assert any(r["document_id"] == added.json()["id"] for r in everything), everything
