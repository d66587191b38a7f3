"""How ``weft chat`` shows a turn to a person: thoughts dimmed as they stream, tool calls
and results one line each, approval prompts and errors highlighted, and the answer
rendered as Markdown (live on a terminal, once complete otherwise)."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.live import Live
from rich.markdown import Markdown
from rich.markup import escape

from weft_cli.output import cell, clean, to_json


class TurnView:
    """Renders one turn's events, in order, to ``console``."""

    def __init__(self, console: Console):
        self._console = console
        self._answer: dict[int, str] = {}
        self._thinking = False
        self._live: Live | None = None

    @property
    def answer(self) -> str:
        """The answer streamed so far (superseded rounds dropped)."""
        return "".join(self._answer[r] for r in sorted(self._answer))

    def show(self, kind: str, envelope: dict[str, Any]) -> None:
        """Render one event (``kind`` is the SSE event name, the envelope's ``type``)."""
        data: dict[str, Any] = envelope.get("data") or {}
        if kind == "thought":
            self._thought(str(data.get("delta", "")))
            return
        self._end_thought()
        if kind == "final_answer":
            self._answer_delta(data)
            return
        line = self._line(kind, data)
        if line is not None:
            self._pause_live()
            self._console.print(line)

    def finish(self, complete: dict[str, Any] | None) -> None:
        """The end of the turn: the answer as Markdown, then its status line."""
        self._end_thought()
        data = (complete or {}).get("data") or {}
        text = clean(str(data.get("final_answer") or self.answer))
        if self._live is not None:
            self._live.update(Markdown(text))
            self._live.stop()
            self._live = None
        elif text:
            self._console.print(Markdown(text))
        if complete is not None:
            self._console.print(status_line(data), style="dim")

    def _thought(self, delta: str) -> None:
        if not self._thinking:
            self._pause_live()
            self._console.print("thinking: ", style="dim italic", end="")
            self._thinking = True
        self._console.print(escape(clean(delta)), style="dim italic", end="")

    def _end_thought(self) -> None:
        if self._thinking:
            self._console.print()
            self._thinking = False

    def _answer_delta(self, data: dict[str, Any]) -> None:
        round_no = int(data.get("round", 0))
        if data.get("superseded"):
            self._answer.pop(round_no, None)
        else:
            self._answer[round_no] = self._answer.get(round_no, "") + str(data.get("delta", ""))
        if self._console.is_terminal:
            if self._live is None:
                self._live = Live(console=self._console, auto_refresh=False)
                self._live.start()
            self._live.update(Markdown(clean(self.answer)), refresh=True)

    def _pause_live(self) -> None:
        """Freeze the live answer before a line is printed under it."""
        if self._live is not None:
            self._live.stop()
            self._live = None

    def _line(self, kind: str, data: dict[str, Any]) -> str | None:
        name = escape(cell(data.get("tool_name", ""), 80))
        if kind == "turn_started":
            return f"[dim]turn started · agent {escape(cell(data.get('agent_id', ''), 80))}[/]"
        if kind == "tool_call":
            return f"[cyan]→ {name}[/] {escape(cell(data.get('arguments', {}), 120))}"
        if kind == "tool_result":
            mark = "[green]✓[/]" if data.get("success") else "[red]✗[/]"
            shown = data.get("output") if data.get("success") else data.get("error")
            took = data.get("duration_ms", 0)
            return f"{mark} {name} ({took} ms) {escape(cell(shown, 160))}"
        if kind == "references":
            titles = [
                str(r.get("title") or r.get("document_id")) for r in data.get("references", [])
            ]
            return f"[dim]sources: {escape(cell(titles, 160))}[/]"
        if kind == "tool_approval_required":
            args = escape(cell(data.get("arguments", {}), 160))
            risk = escape(cell(data.get("risk", ""), 40))
            return f"[yellow]? approval needed[/] for {name} {args} (risk {risk}, " + (
                f"prompt {data.get('prompt_id')})"
            )
        if kind == "tool_approval_resolved":
            outcome = escape(cell(data.get("outcome", ""), 40))
            by = escape(cell(data.get("decided_by", ""), 80))
            return f"[yellow]approval {outcome}[/] for {name} by {by}"
        if kind == "error":
            code = escape(cell(data.get("code", ""), 80))
            return f"[red]error {code}:[/] {escape(cell(data.get('message', ''), 500))}"
        if kind == "complete":
            return None
        return f"[dim]{escape(cell(kind, 80))}[/]"


def status_line(data: dict[str, Any]) -> str:
    """``completed · 2 rounds · 812 ms · 120 in / 40 out tokens``."""
    usage = data.get("usage") or {}
    parts = [
        str(data.get("status", "?")),
        f"{data.get('rounds', 0)} rounds",
        f"{data.get('duration_ms', 0)} ms",
        f"{usage.get('input_tokens', 0)} in / {usage.get('output_tokens', 0)} out tokens",
    ]
    return " · ".join(parts)


def event_line(position: str | None, kind: str, envelope: dict[str, Any]) -> str:
    """One event of ``weft chat --json``: a JSON line."""
    return to_json({"id": position, "event": kind, "data": envelope})
