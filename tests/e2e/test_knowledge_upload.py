"""File upload through the gateway, ingested asynchronously by tool-exec, then searchable
by an agent turn (issue 4: ingestion API through the gateway, progress reported)."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
from weft_testkit import LocalStack, read_turn


async def _wait_ready(api: httpx.AsyncClient, kb_id: str, doc_id: str) -> dict[str, Any]:
    async with asyncio.timeout(60):
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
