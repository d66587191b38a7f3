"""Fork and rollback restore files, through the public API (SPEC S-03, M-07): turn 1 writes
a.txt, turn 2 writes b.txt and changes a.txt; a fork at turn 1 holds turn 1's history and
files only, and a rollback of turn 2 brings the original session back to turn 1's files."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
from weft_testkit import LocalStack, chat_requests

from tests.e2e.sandbox_helpers import sandbox_session, scripted_turn

LIST_FILES = {"command": 'for f in *.txt; do echo "$f=$(cat $f)"; done'}


async def _turn(
    api: httpx.AsyncClient, stack: LocalStack, llm: httpx.AsyncClient, session_id: str,
    marker: str, calls: list[dict[str, Any]],
) -> dict[str, dict[str, Any]]:  # fmt: skip
    results, complete = await scripted_turn(api, stack.api_key, llm, session_id, marker, calls)
    assert complete["status"] == "completed", complete
    return results


async def _stored(api: httpx.AsyncClient, session_id: str, turns: int) -> list[dict[str, Any]]:
    """memory persists from Kafka: wait until ``turns`` turns are stored finished."""
    async with asyncio.timeout(30):
        while True:
            got = await api.get(f"/api/v1/sessions/{session_id}/messages")
            messages: list[dict[str, Any]] = got.json()
            done = [m for m in messages if m["role"] == "assistant" and m["status"] != "running"]
            if len(done) >= turns:
                return messages
            await asyncio.sleep(0.2)


def _stdout(result: dict[str, Any]) -> str:
    assert result["success"], result
    return str(result["output"]).split("stdout:\n")[1].split("stderr:")[0].strip()


async def test_fork_and_rollback_restore_the_files_of_a_turn(
    api: httpx.AsyncClient, stack: LocalStack, llm: httpx.AsyncClient
) -> None:
    sid = await sandbox_session(api, "forker")

    await _turn(api, stack, llm, sid, "FORK-ONE", [
        {"id": "c1", "name": "write_sandbox_file",
         "arguments": {"path": "a.txt", "content": "one"}},
    ])  # fmt: skip
    await _turn(api, stack, llm, sid, "FORK-TWO", [
        {"id": "c2", "name": "shell_exec",
         "arguments": {"command": "echo two > b.txt && echo changed > a.txt"}},
    ])  # fmt: skip
    messages = await _stored(api, sid, 2)
    first, second = messages[0], messages[2]
    assert first["role"] == "user" and "FORK-ONE" in first["content"]
    assert second["role"] == "user" and "FORK-TWO" in second["content"]

    forked = await api.post(f"/api/v1/sessions/{sid}/fork", json={"at_message_id": first["id"]})
    assert forked.status_code == 201, forked.text
    fork = forked.json()
    original = (await api.get(f"/api/v1/sessions/{sid}")).json()
    assert fork["id"] != sid and fork["agent_id"] == original["agent_id"]
    history = (await api.get(f"/api/v1/sessions/{fork['id']}/messages")).json()
    assert [(m["role"], m["content"]) for m in history] == [
        (first["role"], first["content"]), (messages[1]["role"], messages[1]["content"]),
    ]  # fmt: skip

    seen = await _turn(api, stack, llm, fork["id"], "FORK-THREE", [
        {"id": "c3", "name": "shell_exec", "arguments": LIST_FILES},
    ])  # fmt: skip
    assert _stdout(seen["c3"]) == "a.txt=one"  # a.txt as of turn 1, no b.txt
    prompt = (await chat_requests(llm))[-1]["messages"]
    said = " ".join(str(m.get("content") or "") for m in prompt)
    assert "FORK-ONE" in said and "FORK-TWO" not in said  # the fork's history: turn 1 only

    rolled = await api.delete(f"/api/v1/sessions/{sid}/messages", params={"from": second["id"]})
    assert rolled.status_code == 204, rolled.text
    seen = await _turn(api, stack, llm, sid, "FORK-FOUR", [
        {"id": "c4", "name": "shell_exec", "arguments": LIST_FILES},
    ])  # fmt: skip
    assert _stdout(seen["c4"]) == "a.txt=one"

    await _stored(api, fork["id"], 2)
    whole = await api.post(f"/api/v1/sessions/{fork['id']}/fork")  # no body: every turn
    assert whole.status_code == 201, whole.text
    copied = await _stored(api, whole.json()["id"], 2)
    assert [m["content"] for m in copied if m["role"] == "user"] == [
        first["content"], "FORK-THREE please",
    ]  # fmt: skip
