"""What the benchmark scripts share: the machine facts they record and how they save.

Every script prints its result as JSON and writes it to ``bench/results/<name>.json``
(git-ignored), so numbers are compared from files, not from scrollback."""

from __future__ import annotations

import json
import os
import platform
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def machine() -> dict[str, Any]:
    """Python version, core count and the 1-minute load average right now (on a shared
    machine the load decides latencies more than the code does)."""
    return {
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }


def percentile(values: list[float], q: float) -> float | None:
    """The nearest-rank ``q`` quantile (0 < q <= 1) rounded to 0.1; None without values."""
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 1)


def summary(values: list[float], quantiles: tuple[float, ...] = (0.5, 0.99)) -> dict[str, Any]:
    """``{"p50": ..., "p99": ..., "n": ...}`` (one ``pNN`` per quantile); percentiles
    are None when nothing was measured."""
    result: dict[str, Any] = {f"p{round(q * 100)}": percentile(values, q) for q in quantiles}
    return {**result, "n": len(values)}


def save(name: str, result: dict[str, Any]) -> Path:
    """Print ``result`` and write it to ``bench/results/<name>.json``."""
    text = json.dumps(result, indent=2)
    print(text)
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"{name}.json"
    out.write_text(text + "\n")
    print(f"wrote {out}")
    return out
