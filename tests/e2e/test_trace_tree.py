"""One turn with a tool call is one trace: a single span tree from the gateway's HTTP request
through Kafka to the engine, tool-exec and memory (and agent-config and knowledge, which the
gateway and tool-exec call); and every log line of that turn names its trace, its tenant and
its request (docs/tracing.md, "Request logs").

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
from weft_contracts import Topic
from weft_testkit import LocalStack, read_turn

from tests.stack_fixtures import stack_log_dir, stack_spans_file

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


def _log_lines(trace_id: str) -> list[dict[str, Any]]:
    """Every JSON log line of the stack's processes that names ``trace_id``."""
    lines = []
    for log in stack_log_dir("e2e").glob("*.log"):
        for text in log.read_text(errors="replace").splitlines():
            # A line the process is still writing (the file's last) is read next time.
            if trace_id in text and text.startswith("{") and text.endswith("}"):
                lines.append(json.loads(text))
    return lines


async def _turn_logs(trace_id: str) -> list[dict[str, Any]]:
    """The turn's log lines once the gateway's access line is among them (written as the
    response ends, which may be after the client read the last event)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 20
    lines = _log_lines(trace_id)
    while not any(x.get("event") == "http_request" for x in lines) and loop.time() < deadline:
        await asyncio.sleep(0.1)
        lines = _log_lines(trace_id)
    return lines


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
    # The services the gateway and the tool worker call join the same tree: agent-config
    # resolving the agent under the gateway's request, knowledge's search under the tool
    # call (the worker's consumer span, beside its tool.execute span).
    resolve = [s for s in spans if _service(s) == "weft-agent-config"]
    assert resolve and all(ancestors(s)[-1] == roots[0]["name"] for s in resolve), summary
    search = [s for s in spans if s["name"] == "POST /internal/search"]
    assert [_service(s) for s in search] == ["weft-knowledge"], summary
    assert ancestors(search[0])[:2] == [
        f"{Topic.TOOL_CALLS.value} process",
        "agent.tool.search_knowledge",
    ], summary

    # Logs: every line of the turn carries its trace id, tenant and request id; the
    # gateway's access line names the route template, never the session id in the path.
    lines = await _turn_logs(trace_id)
    access = [x for x in lines if x.get("event") == "http_request"]
    assert len(access) == 1 and access[0]["service"] == "gateway", lines
    assert access[0]["route"] == "/api/v1/agent-chat/{session_id}", access
    assert access[0]["status"] == 200 and access[0]["method"] == "POST", access
    assert session_id not in json.dumps(access), access
    assert {x["service"] for x in lines} >= {"gateway", "engine"}, lines
    for line in lines:
        assert line["trace_id"] == trace_id, line
        assert line.get("tenant_id") == stack.tenant, line
        assert line.get("request_id") == access[0]["request_id"], line
