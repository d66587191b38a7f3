"""SPEC H-01 (the policy matrix), H-04 (grants never widen rights): weft_contracts.approvals."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from weft_contracts import Grant, cap_access, decide, grant_covers
from weft_tool_catalog.specs import OFFERABLE_SPECS, always_asks, risk_of

MATRIX = {
    # level: (read, probe, write, destructive)
    "read_only": ("allow", "allow", "deny", "deny"),
    "confirm": ("allow", "allow", "ask", "ask"),
    "auto_write": ("allow", "allow", "allow", "ask"),
}


@pytest.mark.parametrize("level", sorted(MATRIX))
def test_access_levels_decide_by_risk_class(level: str) -> None:
    risks = ("read", "probe", "write", "destructive")
    got = tuple(decide(risk, level) for risk in risks)  # type: ignore[arg-type]
    assert got == MATRIX[level]


@pytest.mark.parametrize("level", sorted(MATRIX))
def test_always_ask_asks_at_every_level_and_no_grant_skips_it(level: str) -> None:
    for risk in ("read", "probe", "write", "destructive"):
        verdict = decide(risk, level, always_ask=True, granted=True)  # type: ignore[arg-type]
        expected = (
            "deny"
            if MATRIX[level][("read", "probe", "write", "destructive").index(risk)] == "deny"
            else "ask"
        )
        assert verdict == expected


def test_a_grant_spares_the_question_but_never_lifts_a_denial() -> None:
    assert decide("write", "confirm", granted=True) == "allow"
    assert decide("destructive", "auto_write", granted=True) == "allow"
    assert decide("write", "read_only", granted=True) == "deny"
    assert decide("destructive", "read_only", granted=True) == "deny"


def test_the_tenant_maximum_caps_the_agent_level() -> None:
    assert cap_access("auto_write", "confirm") == "confirm"
    assert cap_access("auto_write", "read_only") == "read_only"
    assert cap_access("confirm", "auto_write") == "confirm"
    assert cap_access("read_only", None) == "read_only"


def test_every_offered_tool_has_a_risk_class_and_unknown_tools_are_destructive() -> None:
    classes = {spec.name: spec.risk_class() for spec in OFFERABLE_SPECS}
    assert set(classes.values()) <= {"read", "probe", "write", "destructive"}
    assert classes["web_fetch"] == "probe" and classes["search_knowledge"] == "read"
    assert classes["write_sandbox_file"] == "write"
    assert risk_of("mcp_unknown_tool_abc") == "destructive"
    assert not always_asks("search_knowledge")


def _grant(**changes: object) -> Grant:
    now = datetime.now(UTC)
    fields: dict[str, object] = dict(
        grant_id="g1", tenant_id="t", user_id="u", scope="session", session_id="s1",
        agent_id="a1", operations=["shell_exec"], created_at=now,
        expires_at=now + timedelta(hours=1),
    )  # fmt: skip
    fields.update(changes)
    return Grant.model_validate(fields)


def test_grants_cover_only_their_tool_session_agent_and_lifetime() -> None:
    now = datetime.now(UTC).timestamp()

    def covers(g: Grant, tool: str = "shell_exec", sid: str = "s1", aid: str = "a1") -> bool:
        return grant_covers(g, tool, session_id=sid, agent_id=aid, at=now)

    assert covers(_grant())
    assert not covers(_grant(), tool="write_sandbox_file")
    assert not covers(_grant(), sid="s2")
    assert not covers(_grant(), aid="a2")
    assert covers(_grant(scope="agent", session_id=None), sid="s2")
    assert not covers(_grant(scope="automation", session_id=None))
    assert not covers(_grant(revoked_at=datetime.now(UTC)))
    assert not covers(_grant(expires_at=datetime.now(UTC) - timedelta(seconds=1)))


def test_the_documented_risk_table_is_the_code_table() -> None:
    """docs/approvals.md lists every built-in's risk class as the specs say."""
    from pathlib import Path

    from weft_tool_catalog.specs import risk_table

    doc = (Path(__file__).resolve().parents[2] / "docs" / "approvals.md").read_text()
    start = doc.index("<!-- risk-table:start -->\n") + len("<!-- risk-table:start -->\n")
    end = doc.index("\n<!-- risk-table:end -->")
    assert doc[start:end] == risk_table(), "regenerate: weft_tool_catalog.specs.risk_table()"


def test_a_grant_with_resources_covers_only_calls_that_stay_within_them() -> None:
    """SPEC H-04: operations and resources: a grant for ``output/`` spares a write there,
    not one elsewhere, nor one that also names another path."""
    now = datetime.now(UTC).timestamp()
    grant = _grant(operations=["write_sandbox_file"], resources=["output/"])

    def covers(**arguments: object) -> bool:
        return grant_covers(grant, "write_sandbox_file", session_id="s1", agent_id="a1",
                            at=now, arguments=dict(arguments))  # fmt: skip

    assert covers(path="output/report.md", content="x")
    assert not covers(path="notes/secret.md", content="x")
    assert not covers(path="output/a.md", content="see ../etc/b")
    assert not covers(content="no path at all")
