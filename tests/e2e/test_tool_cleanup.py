"""A real turn loads a dataset into tool-exec's DuckDB; its ``complete`` drops it (SPEC T-04,
T-12). Gateway upload -> engine -> scripted LLM -> data_schema on tool-exec -> complete on
``agent.events`` -> tool-exec's broadcast consumer -> cleanup, observed on the worker's
``/internal/state``.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
from weft_testkit import LocalStack, read_turn

CSV = b"Region,Qty\nNorth,3\nSouth,10\nNorth,1\n"


async def _tool_exec_state(stack: LocalStack) -> dict[str, int]:
    async with stack.internal_client("tool_exec", timeout=10) as c:
        state: dict[str, Any] = (await c.get("/internal/state")).json()
    tables: dict[str, int] = state["duckdb_tables_by_session"]
    return tables


async def _wait_for_tables(stack: LocalStack, session_id: str, *, present: bool) -> None:
    async with asyncio.timeout(90):
        while True:
            if (session_id in await _tool_exec_state(stack)) == present:
                return
            await asyncio.sleep(0.2)


async def test_turn_end_drops_the_dataset_loaded_during_the_turn(
    api: httpx.AsyncClient, stack: LocalStack, llm: httpx.AsyncClient
) -> None:  # SPEC T-04, T-12
    kb_id = (await api.post("/api/v1/knowledge-bases", json={"name": "data"})).json()["id"]
    upload = await api.post(
        f"/api/v1/knowledge-bases/{kb_id}/files",
        files={"file": ("sales.csv", CSV, "text/csv")},
    )
    assert upload.status_code == 202, upload.text
    doc_id = upload.json()["id"]
    session = (
        await api.post("/api/v1/sessions", json={"agent_id": "builtin-data-analyst"})
    ).json()["id"]
    # The second model call hangs, holding the turn open after data_schema ran.
    script = {"steps": [
        {"tool_calls": [{"name": "data_schema", "arguments": {"knowledge_id": doc_id}}]},
        {"content": "North and South.", "stall_after_chunks": 1},
    ], "fallback": "demo"}  # fmt: skip
    assert (await llm.post("/_script", json=script)).status_code == 200
    body = {"query": "Which regions are there?", "knowledge_base_ids": [kb_id]}
    turn = asyncio.create_task(
        read_turn(api, f"/api/v1/agent-chat/{session}", api_key=stack.api_key, json_body=body)
    )
    await _wait_for_tables(stack, session, present=True)  # loaded, turn still running
    assert not turn.done()
    await llm.post("/_reset")  # release the stalled model call: the turn ends either way
    events = await turn
    assert events[-1].event == "complete"
    result = next(e for e in events if e.event == "tool_result").data["data"]
    assert result["success"] and '"row_count":3' in result["output"], result
    await _wait_for_tables(stack, session, present=False)
