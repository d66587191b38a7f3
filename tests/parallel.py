"""How the suites run in parallel (pytest-xdist, ``--dist loadgroup``); loaded by
tests/conftest.py.

Each worker is its own process with its own session fixtures, so what a group shares must
stay on one worker:

- a test file is one group, so a module-scoped stack (``test_engine_faults.py``'s, say)
  starts once, on one worker;
- the tests of a session stack other than the common one (``admin_stack_process``,
  ``limits_stack``) form one group per stack, so each starts once;
- the common ``stack`` starts once per worker that needs it (its scripted LLM is reset by
  every test, so two workers could not share one).

Groups start longest first, from ``tests/timings.json`` (seconds per group, written by
``make test-timings``): the longest group then does not start last and leave the other
workers idle at the end. A group missing from the file counts as ``DEFAULT_S``.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path

import pytest

TIMINGS = Path(__file__).with_name("timings.json")
DEFAULT_S = 5.0
SHARED_STACKS = {"admin_stack_process": "admin-stack", "limits_stack": "limits-stack"}
"""Session fixtures that start a stack of their own: their tests form one group."""


def group_of(item: pytest.Item) -> str:
    """The xdist group of ``item``: its shared stack's, else its file's."""
    for fixture, group in SHARED_STACKS.items():
        if fixture in getattr(item, "fixturenames", ()):
            return group
    return item.nodeid.split("::", 1)[0]


def _timings() -> dict[str, float]:
    try:
        loaded = json.loads(TIMINGS.read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): float(v) for k, v in loaded.items()} if isinstance(loaded, dict) else {}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark each test with its group (before xdist reads the marks) and put the groups in
    the order they should start: longest first."""
    if config.getoption("dist", "no") != "loadgroup":
        return
    timings = _timings()
    for item in items:
        if not item.get_closest_marker("xdist_group"):
            item.add_marker(pytest.mark.xdist_group(group_of(item)))
    first_seen = {group_of(item): n for n, item in reversed(list(enumerate(items)))}

    def start_order(item: pytest.Item) -> tuple[float, int]:
        group = group_of(item)
        return (-timings.get(group, DEFAULT_S), first_seen[group])

    items.sort(key=start_order)  # stable: a group's tests keep their order


class TimingRecorder:
    """Adds up each group's setup, call and teardown time; written to ``path`` at the end
    (``WEFT_TEST_TIMINGS_OUT``: ``make test-timings``)."""

    def __init__(self, path: Path):
        self.path = path
        self.seconds: defaultdict[str, float] = defaultdict(float)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        nodeid = report.nodeid
        at = nodeid.rfind("@")
        group = nodeid[at + 1 :] if at > nodeid.rfind("]") else nodeid.split("::", 1)[0]
        self.seconds[group] += report.duration

    def pytest_sessionfinish(self) -> None:
        merged = {**_timings(), **{g: round(s, 1) for g, s in self.seconds.items()}}
        self.path.write_text(json.dumps(dict(sorted(merged.items())), indent=1) + "\n")


def pytest_configure(config: pytest.Config) -> None:
    out = os.environ.get("WEFT_TEST_TIMINGS_OUT")
    if out and not hasattr(config, "workerinput"):  # the controller sees every report
        config.pluginmanager.register(TimingRecorder(Path(out)), "weft-timing-recorder")
