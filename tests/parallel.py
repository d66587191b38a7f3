"""How the suites run in parallel (pytest-xdist, ``--dist loadfile``); loaded by
tests/conftest.py.

Each worker is its own process with its own session fixtures. A test file runs whole on
one worker, so a module-scoped stack (``test_engine_faults.py``'s, say) starts once. A
session stack starts once per worker that needs it: the common ``stack`` on each (each
test resets that stack's scripted LLM, so two workers could not share one), and the admin
and limits stacks on each worker that runs one of their files (they keep per-worker
folders, ``stack_log_dir``).

(``--dist loadgroup`` would keep the files of one session stack on one worker, but
pytest-xdist 3.8 marks a group by editing ``Item._nodeid``, which pytest 9 no longer
reads: the marks are silently ignored.)

Files start longest first, from ``tests/timings.json`` (seconds per file, written by
``make test-timings``), so the longest does not start last and leave the other worker
idle at the end. A file missing from it counts as ``DEFAULT_S``.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path

import pytest

TIMINGS = Path(__file__).with_name("timings.json")
DEFAULT_S = 5.0


def file_of(nodeid: str) -> str:
    """The test file of a node id."""
    return nodeid.split("::", 1)[0]


def _timings() -> dict[str, float]:
    try:
        loaded = json.loads(TIMINGS.read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): float(v) for k, v in loaded.items()} if isinstance(loaded, dict) else {}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Put the files in the order they should start: longest first."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    timings = _timings()
    first_seen = {file_of(item.nodeid): n for n, item in reversed(list(enumerate(items)))}

    def start_order(item: pytest.Item) -> tuple[float, int]:
        path = file_of(item.nodeid)
        return (-timings.get(path, DEFAULT_S), first_seen[path])

    items.sort(key=start_order)  # stable: a file's tests keep their order


class TimingRecorder:
    """Adds up each file's setup, call and teardown time; written to ``path`` at the end
    (``WEFT_TEST_TIMINGS_OUT``: ``make test-timings``)."""

    def __init__(self, path: Path):
        self.path = path
        self.seconds: defaultdict[str, float] = defaultdict(float)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.seconds[file_of(report.nodeid)] += report.duration

    def pytest_sessionfinish(self) -> None:
        merged = {**_timings(), **{f: round(s, 1) for f, s in self.seconds.items()}}
        self.path.write_text(json.dumps(dict(sorted(merged.items())), indent=1) + "\n")


def pytest_configure(config: pytest.Config) -> None:
    out = os.environ.get("WEFT_TEST_TIMINGS_OUT")
    if out and not hasattr(config, "workerinput"):  # the controller sees every report
        config.pluginmanager.register(TimingRecorder(Path(out)), "weft-timing-recorder")
