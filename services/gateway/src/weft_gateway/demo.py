"""``make demo``: ask the running stack a question and print the streamed turn.

Loads the sample knowledge base shipped in ``deploy/sample-kb`` (once per tenant), opens a
session, asks through the public API and prints thoughts, tool calls, results, the answer
with its citations and timings. Exit code 0 only when the turn completed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import httpx
from httpx_sse import aconnect_sse
from rich.console import Console

SAMPLE_KB_NAME = "Weft sample knowledge base"
DEFAULT_QUESTION = "How long do I have to get a refund on an annual plan, and what happens after?"
AGENT = "builtin-smart-reasoning"

console = Console(highlight=False)


async def ensure_sample_kb(api: httpx.AsyncClient, kb_dir: Path) -> str:
    """The id of the sample KB, created and loaded on first use."""
    existing = (await _ok(api.get("/api/v1/knowledge-bases"))).json()
    for kb in existing:
        if kb["name"] == SAMPLE_KB_NAME:
            return str(kb["id"])
    documents = await asyncio.to_thread(read_documents, kb_dir)
    if not documents:
        raise SystemExit(f"no *.md documents in {kb_dir}")
    kb = (await _ok(api.post("/api/v1/knowledge-bases", json={"name": SAMPLE_KB_NAME}))).json()
    for body in documents:
        added = (
            await _ok(api.post(f"/api/v1/knowledge-bases/{kb['id']}/documents", json=body))
        ).json()
        done = f"{added['chunks']} chunk(s)" if added["status"] == "ready" else added["status"]
        console.print(f"[dim]loaded {body['file_name']}: {done}[/dim]")
    return str(kb["id"])


def read_documents(kb_dir: Path) -> list[dict[str, str]]:
    """Request bodies of the Markdown documents in ``kb_dir``."""
    return [
        {"title": doc.stem, "content": doc.read_text(), "file_name": doc.name}
        for doc in sorted(kb_dir.glob("*.md"))
    ]


async def _ok(request: Any) -> httpx.Response:
    resp: httpx.Response = await request
    if resp.status_code >= 400:
        raise SystemExit(f"gateway answered {resp.status_code}: {resp.text}")
    return resp


class TurnPrinter:
    """Prints events as they arrive and keeps the timings."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.first_event: float | None = None
        self.first_answer: float | None = None
        self.status = ""
        self._mode = ""

    def show(self, event: str, envelope: dict[str, Any]) -> None:
        now = time.monotonic() - self.started
        self.first_event = self.first_event if self.first_event is not None else now
        data = envelope["data"]
        if event in ("thought", "final_answer"):
            self._stream(event, data["delta"], now)
            return
        self._end_stream()
        if event == "turn_started":
            console.print(f"[bold]you[/bold]  {data['query']}")
        elif event == "tool_call":
            args = json.dumps(data["arguments"], ensure_ascii=False)
            console.print(f"[cyan]tool call[/cyan]  {data['tool_name']}({args})")
        elif event == "tool_result":
            self._result(data)
        elif event == "references":
            for ref in data["references"]:
                console.print(f"  [magenta]\\[{ref['alias']}][/magenta] {ref['title']}")
        elif event == "error":
            console.print(f"[red]error[/red]  {data['code']}: {data['message']}")
        elif event == "complete":
            self.status = data["status"]

    def _stream(self, event: str, delta: str, now: float) -> None:
        if event == "final_answer" and self.first_answer is None and delta:
            self.first_answer = now
        if self._mode != event:
            self._end_stream()
            label = (
                "[dim italic]thinking[/dim italic]  "
                if event == "thought"
                else "[bold green]answer[/bold green]  "
            )
            console.print(label, end="")
            self._mode = event
        style = "dim italic" if event == "thought" else ""
        console.print(delta, end="", style=style, markup=False)

    def _end_stream(self) -> None:
        if self._mode:
            console.print()
            self._mode = ""

    def _result(self, data: dict[str, Any]) -> None:
        if not data["success"]:
            console.print(f"[red]tool failed[/red]  {data['tool_name']}: {data['error']}")
            return
        try:
            count = json.loads(data["output"]).get("count")
        except (ValueError, AttributeError):
            count = None
        what = f"{count} passage(s)" if count is not None else f"{len(data['output'])} chars"
        console.print(
            f"[cyan]tool result[/cyan]  {data['tool_name']}: {what} in {data['duration_ms']} ms"
        )


async def run(base_url: str, api_key: str, question: str, kb_dir: Path) -> int:
    """Load the KB, ask, print; return the exit code."""
    headers = {"Authorization": f"Bearer {api_key}"}
    async with httpx.AsyncClient(base_url=base_url, headers=headers, timeout=30) as api:
        kb_id = await ensure_sample_kb(api, kb_dir)
        session = (
            await _ok(api.post("/api/v1/sessions", json={"title": "demo", "agent_id": AGENT}))
        ).json()
        printer = TurnPrinter()
        body = {"query": question, "knowledge_base_ids": [kb_id]}
        async with aconnect_sse(
            api, "POST", f"/api/v1/agent-chat/{session['id']}", json=body, timeout=180
        ) as source:
            if source.response.status_code != 200:
                await source.response.aread()
                raise SystemExit(
                    f"chat failed {source.response.status_code}: {source.response.text}"
                )
            async for sse in source.aiter_sse():
                if sse.event and sse.data:
                    printer.show(sse.event, json.loads(sse.data))
                if sse.event == "complete":
                    break
    _summary(printer, base_url, api_key, session["id"], kb_id)
    return 0 if printer.status == "completed" else 1


def _summary(p: TurnPrinter, base_url: str, api_key: str, session_id: str, kb_id: str) -> None:
    total = time.monotonic() - p.started
    first = f"{p.first_event * 1000:.0f} ms" if p.first_event is not None else "-"
    answer = f"{p.first_answer * 1000:.0f} ms" if p.first_answer is not None else "-"
    console.print(
        f"\n[bold]turn {p.status or 'did not complete'}[/bold]  first event {first}, "
        f"first answer token {answer}, complete {total * 1000:.0f} ms"
    )
    console.print(f"\nWeb console: {base_url}/  (sign in with the API key {api_key})", markup=False)
    console.print(f"API docs: {base_url}/docs   OpenAPI: {base_url}/openapi.json")
    console.print("Ask your own question (streams Server-Sent Events):")
    body = json.dumps(
        {"query": "What does the Enterprise plan guarantee?", "knowledge_base_ids": [kb_id]}
    )
    console.print(
        f"  curl -N -H 'Authorization: Bearer {api_key}' -H 'Content-Type: application/json' "
        f"-d '{body}' {base_url}/api/v1/agent-chat/{session_id}",
        markup=False,
        soft_wrap=True,
    )


def main() -> None:
    """CLI entry point."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("question", nargs="?", default=DEFAULT_QUESTION)
    parser.add_argument(
        "--url", default=os.environ.get("WEFT_GATEWAY_URL", "http://127.0.0.1:8080")
    )
    parser.add_argument("--api-key", default=os.environ.get("WEFT_DEV_API_KEY", "weft-dev-key"))
    parser.add_argument("--kb-dir", type=Path, default=Path("deploy/sample-kb"))
    args = parser.parse_args()
    sys.exit(asyncio.run(run(args.url, args.api_key, args.question, args.kb_dir)))


if __name__ == "__main__":
    main()
