"""Sandbox turns through the whole stack (SPEC S-01, S-03, T-15, T-16): the scripted
model writes a file and runs a command in the session's sandbox, the results stream to
the client; the sandbox process is SIGKILLed between two turns and the next turn still
sees the file (restored from its PostgreSQL checkpoint)."""

from __future__ import annotations

from typing import Any

import httpx
from weft_testkit import LocalStack, chat_requests, read_turn

from tests.e2e.sandbox_helpers import SANDBOX_TOOLS, sandbox_session, scripted_turn


async def test_a_sandbox_turn_writes_runs_and_survives_a_killed_sandbox(
    api: httpx.AsyncClient, stack: LocalStack, llm: httpx.AsyncClient
) -> None:
    sid = await sandbox_session(api, "coder")

    report = "# Report\nrows: 3\n"
    results, complete = await scripted_turn(api, stack.api_key, llm, sid, "SANDBOX-ONE", [
        {"id": "call_write", "name": "write_sandbox_file",
         "arguments": {"path": "/workspace/output/report.md", "content": report}},
        {"id": "call_run", "name": "shell_exec",
         "arguments": {"command": "wc -l < output/report.md; ls output; id -u"}},
    ], "written")  # fmt: skip
    assert complete["status"] == "completed" and complete["final_answer"] == "written"
    assert results["call_write"]["success"], results["call_write"]
    ran = results["call_run"]
    assert ran["success"] and ran["output"].startswith("exit_code: 0"), ran
    stdout = ran["output"].split("stdout:\n")[1].split()
    assert stdout[:2] == ["2", "report.md"] and stdout[2] != "0", ran  # never root
    sent = (await chat_requests(llm))[-1]
    offered = sorted(t["function"]["name"] for t in sent["tools"])
    assert offered == sorted(SANDBOX_TOOLS)
    assert any(m["role"] == "tool" and "report.md" in m["content"] for m in sent["messages"])

    assert stack.kill("sandbox") == -9
    stack.start_again("sandbox")

    results, complete = await scripted_turn(api, stack.api_key, llm, sid, "SANDBOX-TWO", [
        {"id": "call_read", "name": "shell_exec", "arguments": {"command": "cat output/report.md"}},
        {"id": "call_edit", "name": "edit_sandbox_file",
         "arguments": {"path": "output/report.md",
                       "edits": [{"old_string": "rows: 3", "new_string": "rows: 4"}]}},
        {"id": "call_check", "name": "read_file", "arguments": {"path": "output/report.md"}},
    ], "still there")  # fmt: skip
    assert complete["final_answer"] == "still there"
    assert results["call_read"]["success"] and report in results["call_read"]["output"]
    assert results["call_edit"]["success"], results["call_edit"]
    assert results["call_check"]["output"] == "# Report\nrows: 4\n", results["call_check"]


async def test_a_provider_that_counts_call_ids_per_response_gets_every_write_run(
    api: httpx.AsyncClient, stack: LocalStack, llm: httpx.AsyncClient
) -> None:
    """Three rounds whose write calls all carry the id ``call_0``, as providers that count
    ``call_0, call_1...`` in every response send them: each round's call runs (the
    sandbox keys its write claims by the turn's call id, so a reused id would be taken
    for a redelivery of the first and never run), and the last round sees both files."""
    sid = await sandbox_session(api, "counter")
    marker = "CALL-IDS-PER-RESPONSE"
    rounds = [
        {"name": "write_sandbox_file", "arguments": {"path": "a.txt", "content": "one"}},
        {"name": "write_sandbox_file", "arguments": {"path": "b.txt", "content": "two"}},
        {"name": "shell_exec", "arguments": {"command": "cat a.txt b.txt"}},
    ]
    steps: list[dict[str, Any]] = [
        {"match": marker, "tool_calls": [{"id": "call_0", **call}]} for call in rounds
    ]
    steps.append({"match": marker, "content": "all three ran"})
    assert (await llm.post("/_script", json={"steps": steps})).status_code == 200
    events = await read_turn(
        api, f"/api/v1/agent-chat/{sid}", api_key=stack.api_key,
        json_body={"query": f"{marker} please"}, timeout_s=240,
    )  # fmt: skip
    complete = events[-1].data["data"]
    assert complete["status"] == "completed" and complete["final_answer"] == "all three ran"
    results = [e.data["data"] for e in events if e.event == "tool_result"]
    assert [r["success"] for r in results] == [True] * 3, results
    ids = [r["call_id"] for r in results]
    assert len(set(ids)) == 3, ids  # one id per call in the client's stream too
    stdout = results[2]["output"].split("stdout:\n")[1].split("stderr:")[0]
    assert "".join(stdout.split()) == "onetwo", results[2]
    # The model read each result under the id of the call it made in that round.
    prompt = (await chat_requests(llm))[-1]["messages"]
    asked = [c["id"] for m in prompt if m["role"] == "assistant" for c in m.get("tool_calls", [])]
    answered = [m["tool_call_id"] for m in prompt if m["role"] == "tool"]
    assert asked == answered == ids, (asked, answered)
