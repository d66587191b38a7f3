"""The README's diagram shows what runs: stop and steer reach the engine over
``weft.agent.control.v1`` (SPEC E-13, E-20 user stop), so those edges are solid and not
marked as planned."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def _diagram() -> list[str]:
    text = README.read_text()
    block = re.search(r"```mermaid\n(.*?)```", text, re.S)
    assert block is not None, "README has its mermaid diagram"
    return [line.strip() for line in block.group(1).splitlines()]


def test_stop_and_steer_edges_are_drawn_as_working() -> None:
    control = [line for line in _diagram() if "T2" in line and ("--" in line or "-." in line)]
    assert any("gateway" in line for line in control), control
    assert any(line.startswith("T2") and "engine" in line for line in control), control
    for line in control:
        assert "-." not in line and ".->" not in line, f"dashed (not built) edge: {line}"
        assert "planned" not in line.lower(), line
