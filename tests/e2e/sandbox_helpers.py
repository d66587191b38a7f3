"""What the sandbox end-to-end tests share: an agent with the sandbox on and a session of
it, and one scripted turn (tool calls, then an answer) through the public API."""

from __future__ import annotations

from typing import Any

import httpx
from weft_testkit import read_turn

SANDBOX_TOOLS = ["shell_exec", "write_sandbox_file", "edit_sandbox_file", "read_file"]


async def sandbox_session(
    api: httpx.AsyncClient, name: str, tools: list[str] = SANDBOX_TOOLS, **agent: Any
) -> str:
    """A new session of a new agent ``name`` with the sandbox on, ``tools`` allowed, no
    knowledge base, and any other agent fields in ``agent``; the session's id."""
    body = {"name": name, "allowed_tools": tools, "sandbox_enabled": True,
            "kb_selection_mode": "none", **agent}  # fmt: skip
    made = await api.post("/api/v1/agents", json=body)
    assert made.status_code == 201, made.text
    session = await api.post("/api/v1/sessions", json={"agent_id": made.json()["id"]})
    assert session.status_code == 201, session.text
    return str(session.json()["id"])


async def scripted_turn(
    api: httpx.AsyncClient, api_key: str, llm: httpx.AsyncClient, session_id: str,
    marker: str, calls: list[dict[str, Any]], answer: str = "done",
) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:  # fmt: skip
    """One turn (of ``api_key``'s caller) whose model makes ``calls`` and then answers
    ``answer``: the tool results by call id, and the ``complete`` event's data."""
    script = {
        "steps": [{"match": marker, "tool_calls": calls}, {"match": marker, "content": answer}]
    }
    assert (await llm.post("/_script", json=script)).status_code == 200
    events = await read_turn(
        api, f"/api/v1/agent-chat/{session_id}", api_key=api_key,
        json_body={"query": f"{marker} please"}, timeout_s=240,
    )  # fmt: skip
    results = {
        e.data["data"]["call_id"]: e.data["data"] for e in events if e.event == "tool_result"
    }
    return results, events[-1].data["data"]
