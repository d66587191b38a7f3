"""Turn-end cleanup in tool-exec (SPEC T-04): which records end a turn, cleanups that run
in the background and survive failures, and tables a later turn still uses."""

from __future__ import annotations

import asyncio

from weft_contracts import CompleteData, CompleteEvent, ThoughtData, ThoughtEvent, TurnStatus
from weft_tool_catalog import ToolInvocation, ToolOutcome, ToolRegistry, ToolSpec
from weft_tool_exec.turn_end import TurnEndCleaner, TurnEnded, turn_ended
from weft_tools.duckdb_workspace import DuckDBWorkspace
from weft_tools.tabular import Table


def test_only_complete_events_end_a_turn() -> None:  # SPEC T-04
    complete = CompleteEvent(
        tenant_id="t", session_id="s1", request_id="r1",
        data=CompleteData(status=TurnStatus.COMPLETED),
    )  # fmt: skip
    assert turn_ended(complete) == TurnEnded("s1", "r1")
    thought = ThoughtEvent(
        tenant_id="t", session_id="s1", request_id="r1", data=ThoughtData(round=0, delta="x")
    )
    assert turn_ended(thought) is None


class Holder:
    """A cleanable tool whose cleanup fails for one session."""

    spec = ToolSpec(name="holder", description="d", parameters={"type": "object"})

    def __init__(self) -> None:
        self.cleaned: list[tuple[str, str]] = []
        self.done = asyncio.Event()

    async def run(self, call: ToolInvocation) -> ToolOutcome:
        return ToolOutcome(success=True)

    async def cleanup(self, session_id: str, request_id: str) -> None:
        if session_id == "broken":
            raise RuntimeError("disk on fire")
        self.cleaned.append((session_id, request_id))
        if len(self.cleaned) == 2:
            self.done.set()


async def test_a_failing_cleanup_does_not_stop_later_ones() -> None:  # SPEC T-04
    tool = Holder()
    registry = ToolRegistry()
    registry.register(tool)
    cleaner = TurnEndCleaner(registry)
    await cleaner.start()
    try:
        for session in ("a", "broken", "b"):
            cleaner.notify(TurnEnded(session, "r"))  # returns at once: never blocks a consumer
        await asyncio.wait_for(tool.done.wait(), 10)
    finally:
        await cleaner.stop()
    assert tool.cleaned == [("a", "r"), ("b", "r")]
    assert cleaner.cleaned == 3  # the failure was isolated by the registry


def test_end_of_an_older_turn_keeps_tables_a_later_turn_uses() -> None:  # SPEC T-04, T-12
    workspace = DuckDBWorkspace()
    table = Table(columns=["a"], rows=[["1"], ["2"]])
    workspace.load("s", "doc1", table, request_id="r1")
    workspace.load("s", "doc1", table, request_id="r2")  # the next turn started already
    assert workspace.end_turn("s", "r1") is False
    assert workspace.tables_by_session() == {"s": 1}
    assert workspace.end_turn("s", "r2") is True
    assert workspace.tables_by_session() == {}
