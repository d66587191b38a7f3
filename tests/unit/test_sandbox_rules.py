"""Sandbox rules that need no process: the edit batch (T-16), the path confinement of the
file tools (S-02) and which agents are offered the sandbox tools (S-05, T-16, A-08).

The same rules against real commands and stores: tests/security/test_sandbox_escape.py."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from weft_agent_config.tool_policy import runtime_tools
from weft_contracts import ToolCallRequested, ToolCallRequestedData, ToolContext
from weft_engine.act import _keyed
from weft_sandbox.tools import EditRejected, apply_edits
from weft_sandbox.workspace import PathRefused, Workspace, workspace_key
from weft_tool_catalog.sandbox_specs import SandboxEdit
from weft_tool_catalog.specs import SANDBOX_TOOLS, definitions_for


def _edit(old: str, new: str, replace_all: bool = False) -> SandboxEdit:
    return SandboxEdit(old_string=old, new_string=new, replace_all=replace_all)


def test_edits_apply_to_the_original_not_to_each_other() -> None:  # SPEC T-16
    # The second edit's old_string appears only after the first edit: not applied to it.
    assert apply_edits("a b c", [_edit("a", "x"), _edit("b", "a")]) == "x a c"
    assert apply_edits("k=1; k=1", [_edit("k=1", "k=2", replace_all=True)]) == "k=2; k=2"


@pytest.mark.parametrize(
    ("edits", "reason"),
    [
        ([_edit("zzz", "y")], "edit 1: old_string not found"),
        ([_edit("ab", "y"), _edit("x", "y")], "edit 2: old_string not found"),
        ([_edit("a", "y")], "occurs 2 times"),
        ([_edit("abc", "y"), _edit("bcd", "z")], "edits 1 and 2 overlap"),
    ],
)
def test_one_bad_edit_rejects_the_batch(edits: list[SandboxEdit], reason: str) -> None:
    with pytest.raises(EditRejected, match=reason):
        apply_edits("abcd a", edits)


def _space(tmp_path: Path) -> Workspace:
    space = Workspace(tenant_id="t", session_id="s", home=tmp_path, uid=0, gid=0)
    (space.work / "input").mkdir(parents=True)
    (space.work / "sub").mkdir()
    return space


@pytest.mark.parametrize(
    "path",
    ["../x", "/workspace/../x", "sub/../../x", "/etc/passwd", "/proc/self/root/etc/passwd",
     "/workspacex/y", "a\x00b"],
)  # fmt: skip
def test_paths_that_leave_the_workspace_are_refused(tmp_path: Path, path: str) -> None:
    with pytest.raises(PathRefused):
        _space(tmp_path).host_path(path)


def test_paths_inside_resolve_and_input_is_read_only(tmp_path: Path) -> None:  # SPEC S-02
    space = _space(tmp_path)
    assert space.host_path("/workspace/sub/f") == (space.work / "sub" / "f").resolve()
    assert space.host_path("sub/./f") == space.host_path("/workspace/sub/f")
    assert space.sandbox_path(space.host_path("sub/f")) == "/workspace/sub/f"
    assert space.host_path("/workspace/input/a.csv").name == "a.csv"  # readable
    for path in ("/workspace/input/a.csv", "input", "/workspace"):
        with pytest.raises(PathRefused):
            space.host_path(path, for_write=True)
    (space.work / "out").symlink_to("/etc")
    with pytest.raises(PathRefused, match="symlink"):
        space.host_path("out/passwd")


def test_workspace_keys_bind_tenant_and_session() -> None:  # SPEC S-01
    assert workspace_key("t1", "s") != workspace_key("t2", "s")
    assert workspace_key("t1", "s") == workspace_key("t1", "s")


def test_script_tools_need_a_sandbox_and_list_only_without_shell() -> None:
    # SPEC S-05, T-16, A-08
    allowed = ["shell_exec", "write_sandbox_file", "list_sandbox_files", "read_file"]
    common = {"has_kb_scope": False, "web_search": False, "memory": False}
    assert runtime_tools(allowed, **common) == ["read_file"]
    assert runtime_tools(allowed, sandbox=True, **common) == [
        "shell_exec", "write_sandbox_file", "read_file",
    ]  # fmt: skip
    no_shell = ["list_sandbox_files", "read_file"]
    assert runtime_tools(no_shell, sandbox=True, **common) == no_shell
    offered = [d["function"]["name"] for d in definitions_for(allowed)]  # type: ignore[index]
    assert offered == sorted(allowed) and set(offered) <= SANDBOX_TOOLS


def test_sandbox_calls_are_keyed_by_session_and_others_by_call() -> None:
    # ARCHITECTURE: sandbox.calls key = session id (workspace affinity); tool.calls keep
    # the call id (a turn's parallel calls spread over workers).
    def call(tool: str) -> ToolCallRequested:
        return ToolCallRequested(
            tenant_id="t", session_id="ses_1", request_id="r",
            data=ToolCallRequestedData(
                call_id="call_1", tool_name=tool, arguments={}, round=0,
                deadline=datetime.now(UTC), context=ToolContext(user_id="u", agent_id="a"),
            ),
        )  # fmt: skip

    shell = call("shell_exec")
    sandbox, other = _keyed(shell), _keyed(call("thinking"))
    assert sandbox.key() == b"ses_1" and other.key() == b"call_1"
    assert sandbox.model_dump_json() == shell.model_dump_json()  # the same record
