"""Skills through the whole stack (SPEC S-04): a package installed with the public API,
listed in the system prompt the model receives (level 1), its SKILL.md read with
``read_file skill://`` (level 2) and its script run with ``shell_exec(skill_name=...)``
(level 3) in the session's sandbox."""

from __future__ import annotations

import secrets

import httpx
from weft_testkit import LocalStack, chat_requests, read_turn

from tests.e2e.sandbox_helpers import sandbox_session
from tests.skill_kit import greeter_zip

SKILL_TOOLS = ["read_file", "shell_exec"]
RUN_GREETER = '"$WEFT_SKILL_DIR/scripts/greet.sh" ada'


async def test_an_installed_skill_is_listed_read_and_run(
    api: httpx.AsyncClient, stack: LocalStack, llm: httpx.AsyncClient
) -> None:
    name = f"greeter-{secrets.token_hex(3)}"
    installed = await api.post(
        "/api/v1/skills", content=greeter_zip(name), headers={"Content-Type": "application/zip"}
    )
    assert installed.status_code == 201, installed.text
    assert installed.json()["name"] == name and installed.json()["file_count"] == 2
    listed = (await api.get("/api/v1/skills")).json()
    assert name in [s["name"] for s in listed]
    files = (await api.get(f"/api/v1/skills/{name}")).json()["files"]
    assert {"path": "scripts/greet.sh", "bytes": files[1]["bytes"], "executable": True} in files

    sid = await sandbox_session(
        api, "skilled", SKILL_TOOLS, skills_selection_mode="selected", selected_skills=[name]
    )
    marker = "SKILL-TURN"
    # Call ids unique to this test: a write call's claim is keyed by its id in the stack.
    read_id, run_id = f"call_read_{secrets.token_hex(3)}", f"call_run_{secrets.token_hex(3)}"
    script = {"steps": [
        {"match": marker, "tool_calls": [{"id": read_id, "name": "read_file",
                                          "arguments": {"path": f"skill://{name}/SKILL.md"}}]},
        {"match": marker, "tool_calls": [{"id": run_id, "name": "shell_exec",
                                          "arguments": {"skill_name": name,
                                                        "command": RUN_GREETER}}]},
        {"match": marker, "content": "greeted"},
    ]}  # fmt: skip
    assert (await llm.post("/_script", json=script)).status_code == 200
    events = await read_turn(
        api, f"/api/v1/agent-chat/{sid}", api_key=stack.api_key,
        json_body={"query": f"{marker}: greet ada"}, timeout_s=240,
    )  # fmt: skip
    results = {
        e.data["data"]["call_id"]: e.data["data"] for e in events if e.event == "tool_result"
    }
    assert events[-1].data["data"]["final_answer"] == "greeted"
    read = results[read_id]
    assert read["success"] and f"name: {name}" in read["output"], read
    ran = results[run_id]
    assert ran["success"] and f"greetings from /skills/{name}: ada" in ran["output"], ran

    sent = await chat_requests(llm)
    system = sent[0]["messages"][0]
    assert system["role"] == "system"
    assert f"- {name}: Greets people by name." in system["content"], system["content"]
    assert (await api.delete(f"/api/v1/skills/{name}")).status_code == 204
    assert (await api.get(f"/api/v1/skills/{name}")).status_code == 404
