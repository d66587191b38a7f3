"""Session files through the public API (SPEC S-01, S-02, S-03): a CSV uploaded as an
attachment, a turn whose scripted model runs a script on it that writes
/workspace/output/report.md, the deliverable announced on the session's SSE stream, then
listed and downloaded from the gateway."""

from __future__ import annotations

import httpx
from weft_testkit import LocalStack, read_turn

from tests.e2e.sandbox_helpers import sandbox_session

FILE_TOOLS = ["shell_exec", "read_file"]
CSV = "region,units\nnorth,12\nsouth,30\neast,8\n"
SCRIPT = (  # what a model would write: python3 over the attachment, a Markdown report
    "python3 -c \"import csv; rows = list(csv.DictReader(open('input/data.csv'))); "
    "total = sum(int(r['units']) for r in rows); "
    "open('output/report.md', 'w')"
    ".write(f'# Units\\\\nrows: {len(rows)}\\\\ntotal: {total}\\\\n')\""
)
REPORT = b"# Units\nrows: 3\ntotal: 50\n"


async def test_an_uploaded_csv_becomes_a_downloaded_report(
    api: httpx.AsyncClient, stack: LocalStack, llm: httpx.AsyncClient
) -> None:
    sid = await sandbox_session(api, "analyst", FILE_TOOLS)

    uploaded = await api.post(
        f"/api/v1/sessions/{sid}/files", files={"file": ("data.csv", CSV.encode(), "text/csv")}
    )
    assert uploaded.status_code == 201, uploaded.text
    assert uploaded.json()["path"] == "input/data.csv" and uploaded.json()["size"] == len(CSV)
    inputs = (await api.get(f"/api/v1/sessions/{sid}/files", params={"dir": "input"})).json()
    assert [f["name"] for f in inputs["files"]] == ["data.csv"]

    script = {"steps": [
        {"match": "FILES-ONE", "tool_calls": [
            {"id": "call_peek", "name": "read_file", "arguments": {"path": "attachment://data.csv"}},
            {"id": "call_run", "name": "shell_exec", "arguments": {"command": SCRIPT}},
        ]},
        {"match": "FILES-ONE", "content": "report ready"},
    ]}  # fmt: skip
    assert (await llm.post("/_script", json=script)).status_code == 200
    events = await read_turn(
        api, f"/api/v1/agent-chat/{sid}", api_key=stack.api_key,
        json_body={"query": "FILES-ONE summarise the attachment"}, timeout_s=240,
    )  # fmt: skip
    results = {e.data["data"]["call_id"]: e.data["data"] for e in events
               if e.event == "tool_result"}  # fmt: skip
    assert results["call_peek"]["output"] == CSV, results["call_peek"]
    assert results["call_run"]["output"].startswith("exit_code: 0"), results["call_run"]
    announced = [e.data["data"] for e in events if e.event == "deliverable"]
    assert announced == [
        {"call_id": "call_run", "tool_name": "shell_exec", "path": "output/report.md",
         "size": len(REPORT), "download_path": f"/api/v1/sessions/{sid}/files/output/report.md"}
    ], announced  # fmt: skip
    order = [e.event for e in events]
    assert order.index("deliverable") > order.index("tool_result")
    assert events[-1].data["data"]["final_answer"] == "report ready"

    listed = (await api.get(f"/api/v1/sessions/{sid}/files")).json()
    assert [(f["path"], f["size"]) for f in listed["files"]] == [("output/report.md", 26)]
    got = await api.get(announced[0]["download_path"])
    assert got.status_code == 200, got.text
    assert got.content == REPORT
    assert got.headers["content-type"].startswith("text/markdown")
    assert got.headers["content-disposition"] == "attachment; filename*=UTF-8''report.md"
