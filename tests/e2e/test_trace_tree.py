"""One turn with a tool call is one trace: a single span tree from the gateway's HTTP request
through Kafka to the engine, tool-exec and memory.

The shared stack writes every process's spans to one file and samples no new trace
(``stack_tracing_env``); this test sends a ``traceparent`` with the sampled flag, so its
turn is the one trace recorded under that id.
"""

from __future__ import annotations

import asyncio
import json
import secrets
from typing import Any

import httpx
from weft_testkit import LocalStack, read_turn

from tests.stack_fixtures import stack_spans_file

AGENT = "builtin-smart-reasoning"


def _spans(trace_id: str) -> list[dict[str, Any]]:
    path = stack_spans_file()
    if not path.exists():
        return []
    found = []
    for line in path.read_text(errors="replace").splitlines():
        if trace_id in line:
            span = json.loads(line)
            if span["context"]["trace_id"] == f"0x{trace_id}":
                found.append(span)
    return found


def _service(span: dict[str, Any]) -> str:
    return str(span["resource"]["attributes"]["service.name"])


def _orphans(spans: list[dict[str, Any]], root_parent: str) -> list[str]:
    """Names of spans whose parent is neither another span of the trace nor the client's."""
    ids = {s["context"]["span_id"] for s in spans}
    return [s["name"] for s in spans if s["parent_id"] not in ids and s["parent_id"] != root_parent]


def _complete(spans: list[dict[str, Any]], root_parent: str) -> bool:
    names = {s["name"] for s in spans}
    services = {_service(s) for s in spans}
    wanted = {"agent.execute", "agent.tool.search_knowledge", "tool.execute.search_knowledge"}
    return (
        wanted <= names
        and {"weft-gateway", "weft-engine", "weft-tool-exec", "weft-memory"} <= services
        and not _orphans(spans, root_parent)
    )


async def _wait_for_tree(trace_id: str, root_parent: str) -> list[dict[str, Any]]:
    """The trace's spans once complete (they are exported in batches after the turn), or
    what is there after 30 s for the assertions to name."""
    spans: list[dict[str, Any]] = []
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 30
    while loop.time() < deadline:
        spans = _spans(trace_id)
        if _complete(spans, root_parent):
            break
        await asyncio.sleep(0.2)
    return spans


async def test_one_turn_with_a_tool_call_is_one_span_tree(
    api: httpx.AsyncClient, stack: LocalStack, knowledge_base: str
) -> None:
    trace_id, client_span = secrets.token_hex(16), secrets.token_hex(8)
    resp = await api.post("/api/v1/sessions", json={"title": "trace", "agent_id": AGENT})
    assert resp.status_code == 201, resp.text
    session_id = resp.json()["id"]
    body = {"query": "How long do I have to get a refund on an annual plan?",
            "knowledge_base_ids": [knowledge_base]}  # fmt: skip
    events = await read_turn(
        api, f"/api/v1/agent-chat/{session_id}", api_key=stack.api_key, json_body=body,
        headers={"traceparent": f"00-{trace_id}-{client_span}-01"},
    )  # fmt: skip
    assert events[-1].data["data"]["status"] == "completed", events[-1].data
    assert "tool_result" in [e.event for e in events]

    root_parent = f"0x{client_span}"
    spans = await _wait_for_tree(trace_id, root_parent)
    summary = sorted((_service(s), s["name"]) for s in spans)
    assert not _orphans(spans, root_parent), summary
    roots = [s for s in spans if s["parent_id"] == root_parent]
    assert [(_service(s), s["kind"]) for s in roots] == [("weft-gateway", "SpanKind.SERVER")], (
        summary
    )
    assert roots[0]["name"] == "POST /api/v1/agent-chat/{session_id}", roots[0]["name"]
    by_id = {s["context"]["span_id"]: s for s in spans}

    def ancestors(span: dict[str, Any]) -> list[str]:
        chain = []
        while span["parent_id"] in by_id:
            span = by_id[span["parent_id"]]
            chain.append(span["name"])
        return chain

    worker = next(s for s in spans if s["name"] == "tool.execute.search_knowledge")
    assert _service(worker) == "weft-tool-exec"
    assert ancestors(worker)[:2] == ["agent.tool.search_knowledge", "agent.round.0"], summary
    assert ancestors(worker)[-1] == roots[0]["name"]
    memory = [s for s in spans if _service(s) == "weft-memory"]
    assert memory, summary
    assert all(ancestors(s)[-1] == roots[0]["name"] for s in memory), summary
