"""The wiki end to end (SPEC T-18, T-20, E-22, A-03, A-08) through the public API with the
scripted model: a document ingested into a wiki KB becomes pages (the knowledge worker
asks the model, off the request path, and meters it); the wiki-researcher built-in
searches and reads them and cites a page as ``wN``; the wiki-fixer renames a page and
the page linking to it follows; the model never sees a stored id."""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import asyncpg
import httpx
from httpx_sse import aconnect_sse
from weft_testkit import LocalStack, chat_requests, read_turn

from tests.e2e.test_metrics import model_calls

GENERATED = {
    "pages": [
        {
            "slug": "Stardust Probe", "title": "Stardust probe", "page_type": "entity",
            "summary": "A sample-return probe built at Skyvault.", "aliases": ["Stardust"],
            "content": "The Stardust probe returned comet dust in 2006. It was assembled at "
                       "[[skyvault-station]].",
        },
        {
            "slug": "skyvault-station", "title": "Skyvault station", "page_type": "entity",
            "summary": "An orbital assembly yard.", "content": "Skyvault assembles probes.",
        },
        {"slug": "../../etc/passwd", "title": "bad", "content": "refused slug"},
    ]
}  # fmt: skip
STORED_ID = re.compile(r"\b(?:kb|doc|chk|wp|wi)_[0-9A-Z]{26}\b")


async def _wiki_ready(api: httpx.AsyncClient, kb_id: str, timeout_s: float = 60) -> dict[str, Any]:
    async with asyncio.timeout(timeout_s):
        while True:
            resp = await api.get(f"/api/v1/knowledge-bases/{kb_id}/wiki")
            assert resp.status_code == 200, resp.text
            status: dict[str, Any] = resp.json()
            docs = status["documents"]
            if docs["done"] or docs["failed"]:
                return status
            await asyncio.sleep(0.3)


async def _wiki_kb(api: httpx.AsyncClient, llm: httpx.AsyncClient, tag: str) -> str:
    """A wiki KB whose one document the scripted model turned into pages."""
    created = await api.post("/api/v1/knowledge-bases", json={"name": tag, "wiki_enabled": True})
    assert created.status_code == 201 and created.json()["wiki_enabled"] is True, created.text
    kb_id: str = created.json()["id"]
    added = await api.post(
        f"/api/v1/knowledge-bases/{kb_id}/documents",
        json={"title": f"{tag} mission notes", "content": "Stardust returned comet dust in 2006."},
    )
    assert added.status_code == 201, added.text
    status = await _wiki_ready(api, kb_id)
    assert status["documents"]["done"] == 1 and status["pages"] == 2, status
    return kb_id


def _script(tag: str, *steps: dict[str, Any]) -> dict[str, Any]:
    generate = {"match": f"WIKI PAGES FOR DOCUMENT: {tag}", "content": json.dumps(GENERATED)}
    return {"steps": [generate, *({"match": tag, **s} for s in steps)]}


async def _turn(
    api: httpx.AsyncClient, stack: LocalStack, agent_id: str, kb_id: str, query: str
) -> list[Any]:
    session = await api.post("/api/v1/sessions", json={"agent_id": agent_id})
    assert session.status_code == 201, session.text
    events = await read_turn(
        api, f"/api/v1/agent-chat/{session.json()['id']}", api_key=stack.api_key,
        json_body={"query": query, "knowledge_base_ids": [kb_id]},
    )  # fmt: skip
    assert events[-1].data["data"]["status"] == "completed", events[-1].data
    return events


async def test_a_document_becomes_pages_a_wiki_researcher_reads_and_cites(
    api: httpx.AsyncClient, stack: LocalStack, llm: httpx.AsyncClient
) -> None:
    await llm.post("/_script", json=_script(
        "WIKIQ",
        {"tool_calls": [{"name": "wiki_search", "arguments": {"query": "stardust|comet"}}]},
        {"tool_calls": [{"name": "wiki_read_page", "arguments": {"slugs": ["stardust-probe"]}}]},
        {"content": "The Stardust probe returned comet dust in 2006 [w1]."},
    ))  # fmt: skip
    calls_before = await model_calls(stack, "knowledge_worker")
    kb_id = await _wiki_kb(api, llm, "WIKIQ")
    # The generation's model call is in the worker's weft_llm_* metrics (observability).
    assert await model_calls(stack, "knowledge_worker") >= calls_before + 1
    page = (await api.get(f"/api/v1/knowledge-bases/{kb_id}/wiki/page",
                          params={"slug": "stardust-probe"})).json()  # fmt: skip
    assert page["title"] == "Stardust probe" and len(page["source_refs"]) == 1
    assert [link["slug"] for link in page["outgoing"]] == ["skyvault-station"]

    events = await _turn(
        api, stack, "builtin-wiki-researcher", kb_id, "WIKIQ: what did Stardust bring back?"
    )
    results = [e.data["data"] for e in events if e.event == "tool_result"]
    assert [r["success"] for r in results] == [True, True], results
    found = json.loads(results[0]["output"])
    assert found["mode"] == "regex"
    assert [r["slug"] for r in found["results"]] == ["stardust-probe"]
    assert found["results"][0]["page"] == "w1" and "summary" in found["results"][0]
    read = json.loads(results[1]["output"])["pages"][0]
    assert "comet dust" in read["content"] and read["sources"] == ["d1"]
    assert read["links_out"][0]["slug"] == "skyvault-station"
    references = [
        r for e in events if e.event == "references" for r in e.data["data"]["references"]
    ]
    assert [(r["alias"], r["knowledge_base_id"]) for r in references] == [("w1", kb_id)]
    assert references[0]["chunk_id"] == page["id"]
    assert "[w1]" in events[-1].data["data"]["final_answer"]

    sent = await chat_requests(llm)
    tools = {t["function"]["name"] for t in sent[-1]["tools"]}
    assert {"wiki_search", "wiki_read_page", "wiki_flag_issue"} <= tools
    assert not tools & {"wiki_write_page", "wiki_rename_page"}  # the researcher's list
    assert STORED_ID.findall(json.dumps(sent[1:])) == []  # E-22 (sent[0]: the generation)

    conn = await asyncpg.connect(stack.database_url.replace("postgresql+asyncpg", "postgresql"))
    try:
        metered = await conn.fetchval(
            "SELECT sum(llm_calls) FROM usage WHERE tenant_id = $1 AND source = 'wiki'",
            stack.tenant,
        )
    finally:
        await conn.close()
    assert metered and metered >= 1


async def test_a_wiki_fixer_renames_a_page_and_its_inbound_links_follow(
    api: httpx.AsyncClient, stack: LocalStack, llm: httpx.AsyncClient
) -> None:
    rename = {"slug": "skyvault-station", "new_slug": "skyvault-yard"}
    await llm.post("/_script", json=_script(
        "WIKIFIX",
        {"tool_calls": [{"name": "wiki_rename_page", "arguments": rename}]},
        {"tool_calls": [{"name": "wiki_read_issue", "arguments": {"slug": "skyvault-yard"}}]},
        {"content": "Renamed skyvault-station to skyvault-yard."},
    ))  # fmt: skip
    kb_id = await _wiki_kb(api, llm, "WIKIFIX")
    events = await _turn(api, stack, "builtin-wiki-fixer", kb_id, "WIKIFIX: rename the yard")
    results = [e.data["data"] for e in events if e.event == "tool_result"]
    assert all(r["success"] for r in results), results
    renamed = json.loads(results[0]["output"])
    assert renamed["slug"] == "skyvault-yard" and renamed["updated_links_in"] == ["stardust-probe"]

    base = f"/api/v1/knowledge-bases/{kb_id}/wiki"
    linking = (await api.get(f"{base}/page", params={"slug": "stardust-probe"})).json()
    assert "[[skyvault-yard]]" in linking["content"]
    assert [(x["slug"], x["exists"]) for x in linking["outgoing"]] == [("skyvault-yard", True)]
    history = (await api.get(f"{base}/page/history", params={"slug": "stardust-probe"})).json()
    assert [h["change"] for h in history] == ["link_renamed", "created"]
    gone = await api.get(f"{base}/page", params={"slug": "skyvault-station"})
    assert gone.status_code == 404
    listed = (await api.get(f"{base}/pages")).json()
    assert sorted(p["slug"] for p in listed["items"]) == ["skyvault-yard", "stardust-probe"]

    tools = {t["function"]["name"] for t in (await chat_requests(llm))[-1]["tools"]}
    assert "wiki_read_issue" in tools and "wiki_list_issues" not in tools  # the old name maps
    assert {"wiki_write_page", "wiki_rename_page", "wiki_delete_page"} <= tools


async def test_the_hybrid_rag_wiki_preset_searches_pages_and_passages(
    api: httpx.AsyncClient, stack: LocalStack, llm: httpx.AsyncClient
) -> None:
    """The hybrid-rag-wiki preset prefills an agent that a wiki KB (documents + wiki)
    serves: one round searches the wiki and the chunks at once, both answer."""
    await llm.post("/_script", json=_script(
        "WIKIHYB",
        {"tool_calls": [
            {"name": "wiki_search", "arguments": {"query": "C++", "regex": False}},
            {"name": "search_knowledge", "arguments": {"query": "comet dust", "mode": "keyword"}},
        ]},
        {"content": "Stardust returned comet dust [c1]."},
    ))  # fmt: skip
    kb_id = await _wiki_kb(api, llm, "WIKIHYB")
    created = await api.post("/api/v1/agents", json={
        "name": "hybrid", "agent_type": "hybrid-rag-wiki", "kb_selection_mode": "selected",
        "knowledge_base_ids": [kb_id],
    })  # fmt: skip
    assert created.status_code == 201, created.text
    assert {"wiki_search", "search_knowledge"} <= set(created.json()["allowed_tools"])
    events = await _turn(api, stack, created.json()["id"], kb_id, "WIKIHYB: what came back?")
    results = {e.data["data"]["tool_name"]: e.data["data"] for e in events
               if e.event == "tool_result"}  # fmt: skip
    assert results["wiki_search"]["success"] and results["search_knowledge"]["success"], results
    assert json.loads(results["wiki_search"]["output"])["mode"] == "literal"
    assert "comet dust" in results["search_knowledge"]["output"]


async def test_a_wiki_switched_on_later_backfills_and_announces_to_the_uploads_session(
    api: httpx.AsyncClient, llm: httpx.AsyncClient
) -> None:
    """A KB made without a wiki holds a document uploaded with a session; switching its
    wiki on (PATCH) queues that document, the worker writes its pages, and the session's
    stream gets the ``knowledge_progress`` notice through the gateway's notices group."""
    await llm.post("/_script", json=_script("WIKILATE"))
    session = await api.post("/api/v1/sessions", json={})
    assert session.status_code == 201, session.text
    session_id = session.json()["id"]
    kb_id = (await api.post("/api/v1/knowledge-bases", json={"name": "late"})).json()["id"]
    added = await api.post(f"/api/v1/knowledge-bases/{kb_id}/documents", json={
        "title": "WIKILATE mission notes", "content": "Stardust returned comet dust.",
        "session_id": session_id,
    })  # fmt: skip
    assert added.status_code == 201, added.text

    switched = await api.patch(f"/api/v1/knowledge-bases/{kb_id}", json={"wiki_enabled": True})
    assert switched.status_code == 200, switched.text
    view = switched.json()
    assert view["wiki_enabled"] and view["backfilled"] == {"wiki": 1, "graph": 0}
    assert "wiki" in view["capabilities"]

    notice = await _first_notice(api, session_id, "knowledge_progress")
    data = notice["data"]
    assert (data["stage"], data["state"], data["knowledge_base_id"]) == ("wiki", "done", kb_id)
    assert data["document_id"] == added.json()["id"] and data["totals"] == {"pages": 2}
    assert "credential" not in notice
    status = await _wiki_ready(api, kb_id)
    assert status["documents"]["done"] == 1 and status["pages"] == 2


async def _first_notice(
    api: httpx.AsyncClient, session_id: str, kind: str, timeout_s: float = 60
) -> dict[str, Any]:
    """The session stream's first event of type ``kind`` (the stream is 404 until the
    projector writes its first entry: a session without a turn has none before)."""
    url = f"/api/v1/sessions/{session_id}/stream"
    headers = {"Last-Event-ID": "0-0"}
    async with asyncio.timeout(timeout_s):
        while True:
            async with aconnect_sse(api, "GET", url, headers=headers, timeout=timeout_s) as sse:
                if sse.response.status_code == 404:
                    await asyncio.sleep(0.3)
                    continue
                assert sse.response.status_code == 200, await sse.response.aread()
                async for event in sse.aiter_sse():
                    if event.event == kind:
                        found: dict[str, Any] = json.loads(event.data)
                        return found
