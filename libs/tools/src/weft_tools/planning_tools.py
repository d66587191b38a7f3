"""``thinking`` (sequential thinking, SPEC T-05) and ``todo_write`` (retrieval plan, T-06).

Both keep their state per turn (session id + request id) in the worker's memory: a turn's
calls may land on different workers, so the state only shapes the progress text the model
reads; nothing depends on it surviving a worker.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from weft_tool_catalog.registry import ToolInvocation, ToolOutcome, dumps
from weft_tool_catalog.specs import THINKING, TODO_WRITE, ThinkingArguments, TodoWriteArguments

_MAX_TURNS = 1024  # bound on remembered turns per worker (invariant 6)


class _TurnMemory:
    """Per-turn values, oldest turns forgotten first."""

    def __init__(self) -> None:
        self._values: OrderedDict[tuple[str, str], Any] = OrderedDict()

    def get(self, key: tuple[str, str], default: Any) -> Any:
        if key not in self._values:
            self._values[key] = default
            while len(self._values) > _MAX_TURNS:
                self._values.popitem(last=False)
        return self._values[key]

    def drop(self, key: tuple[str, str]) -> None:
        self._values.pop(key, None)


class ThinkingTool:
    """Records thoughts; returns progress including the steps still to think (T-05)."""

    spec = THINKING

    def __init__(self) -> None:
        self._turns = _TurnMemory()

    async def run(self, call: ToolInvocation) -> ToolOutcome:
        """Record the thought and report progress."""
        args = call.args(ThinkingArguments)
        thoughts: dict[int, ThinkingArguments] = self._turns.get(
            (call.session_id, call.request_id), {}
        )
        number = args.thought_number
        total = max(args.total_thoughts, number)
        thoughts[number] = args
        branches = sorted({t.branch_id for t in thoughts.values() if t.branch_id})
        incomplete = [n for n in range(1, total + 1) if n not in thoughts]
        progress = {
            "thought_number": number,
            "total_thoughts": total,
            "next_thought_needed": args.next_thought_needed,
            "recorded": len(thoughts),
            "incomplete_steps": incomplete,
            "branches": branches,
            "reminder": "Never name tools or give the final answer inside a thought.",
        }
        return ToolOutcome(success=True, output=dumps(progress), display_type="thinking")

    async def cleanup(self, session_id: str, request_id: str) -> None:
        """Forget the turn's thoughts."""
        self._turns.drop((session_id, request_id))


class TodoWriteTool:
    """Keeps the turn's retrieval plan and returns it formatted (T-06)."""

    spec = TODO_WRITE

    async def run(self, call: ToolInvocation) -> ToolOutcome:
        """Format the plan."""
        args = call.args(TodoWriteArguments)
        steps, task = args.steps, args.task or ""
        marks = {"pending": "[ ]", "in_progress": "[~]", "completed": "[x]"}
        lines = [f"Plan: {task}"] if task else ["Plan:"]
        lines += [f"{marks[s.status]} {s.id}. {s.description}" for s in steps]
        done = sum(1 for s in steps if s.status == "completed")
        lines.append(f"{done}/{len(steps)} completed")
        return ToolOutcome(
            success=True,
            output="\n".join(lines),
            display_type="plan",
            data={"task": task, "steps": [s.model_dump() for s in steps]},
        )
