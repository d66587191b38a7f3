"""File upload through the gateway, ingested asynchronously by tool-exec, then searchable
by an agent turn (ingestion API through the gateway, progress reported)."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
from weft_testkit import LocalStack, read_turn


async def _wait_ready(
    api: httpx.AsyncClient, kb_id: str, doc_id: str, timeout_s: float = 60
) -> dict[str, Any]:
    async with asyncio.timeout(timeout_s):
        while True:
            doc: dict[str, Any] = (
                await api.get(f"/api/v1/knowledge-bases/{kb_id}/documents/{doc_id}")
            ).json()
            if doc["status"] in ("ready", "failed"):
                return doc
            await asyncio.sleep(0.3)


async def test_uploaded_markdown_is_ingested_then_found_by_the_agent(
    api: httpx.AsyncClient, stack: LocalStack
) -> None:
    kb_id = (await api.post("/api/v1/knowledge-bases", json={"name": "uploads"})).json()["id"]
    text = "# Parking\n\nVisitors park on level minus two; the barrier code is 4417.\n"
    resp = await api.post(
        f"/api/v1/knowledge-bases/{kb_id}/files",
        files={"file": ("parking.md", text.encode(), "text/markdown")},
    )
    assert resp.status_code == 202, resp.text
    assert resp.json()["status"] == "pending"
    doc = await _wait_ready(api, kb_id, resp.json()["id"])
    assert doc["status"] == "ready" and doc["chunk_count"] >= 1, doc
    listed = (await api.get(f"/api/v1/knowledge-bases/{kb_id}/documents")).json()
    assert [d["title"] for d in listed["items"]] == ["parking.md"]

    session = (
        await api.post("/api/v1/sessions", json={"agent_id": "builtin-smart-reasoning"})
    ).json()
    events = await read_turn(
        api, f"/api/v1/agent-chat/{session['id']}", api_key=stack.api_key,
        json_body={"query": "What is the parking barrier code?", "knowledge_base_ids": [kb_id]},
    )  # fmt: skip
    result = next(e for e in events if e.event == "tool_result").data["data"]
    assert "4417" in result["output"]
    assert "4417" in events[-1].data["data"]["final_answer"]


async def test_unsupported_and_empty_files_are_refused(api: httpx.AsyncClient) -> None:
    kb_id = (await api.post("/api/v1/knowledge-bases", json={"name": "bad"})).json()["id"]
    url = f"/api/v1/knowledge-bases/{kb_id}/files"
    exe = await api.post(url, files={"file": ("tool.exe", b"MZ", "application/octet-stream")})
    assert exe.status_code == 415 and "unsupported" in exe.json()["detail"]
    empty = await api.post(url, files={"file": ("empty.txt", b"", "text/plain")})
    assert empty.status_code == 422
    missing = await api.post(
        "/api/v1/knowledge-bases/kb_nope/files", files={"file": ("a.txt", b"x")}
    )
    assert missing.status_code == 404


def _handbook(paragraphs: int) -> bytes:
    """A long Markdown file: one fact up front, then thousands of unrelated paragraphs."""
    lines = [
        "# Facility handbook",
        "",
        "Visitors park on level minus two; the barrier code is 4417.",
    ]
    lines += [
        f"Paragraph {i} covers routine maintenance of the office plants, printers and "
        f"coffee machines on floor {i % 7}, with the weekly schedule and who to call."
        for i in range(paragraphs)
    ]
    return "\n\n".join(lines).encode()


async def test_an_agent_turn_completes_while_a_large_upload_is_ingesting(
    api: httpx.AsyncClient, stack: LocalStack
) -> None:
    """Ingestion runs asynchronously and an agent query during it does not block.

    The assertion is on ordering: the turn has completed (with the fact found) while the
    document is still being embedded, and the document finishes afterwards.
    """
    kb_id = (await api.post("/api/v1/knowledge-bases", json={"name": "big"})).json()["id"]
    resp = await api.post(
        f"/api/v1/knowledge-bases/{kb_id}/files",
        files={"file": ("handbook.md", _handbook(12_000), "text/markdown")},
    )
    assert resp.status_code == 202, resp.text
    doc_url = f"/api/v1/knowledge-bases/{kb_id}/documents/{resp.json()['id']}"
    async with asyncio.timeout(120):  # chunks stored, embeddings under way
        while True:
            doc = (await api.get(doc_url)).json()
            if doc["status"] == "processing" and doc["chunk_count"] > 0:
                break
            assert doc["status"] in ("pending", "processing"), doc  # not failed, not ready yet
            await asyncio.sleep(0.2)

    session = (
        await api.post("/api/v1/sessions", json={"agent_id": "builtin-smart-reasoning"})
    ).json()
    events = await read_turn(
        api, f"/api/v1/agent-chat/{session['id']}", api_key=stack.api_key,
        json_body={"query": "What is the parking barrier code?", "knowledge_base_ids": [kb_id]},
    )  # fmt: skip
    during = (await api.get(doc_url)).json()
    assert events[-1].event == "complete" and "4417" in events[-1].data["data"]["final_answer"]
    assert during["status"] == "processing", during  # the turn did not wait for ingestion
    assert during["embedded_count"] < during["chunk_count"], during
    done = await _wait_ready(api, kb_id, resp.json()["id"], timeout_s=600)
    assert done["status"] == "ready" and done["embedded_count"] == done["chunk_count"], done
