"""Which reasoning levels each model accepts (SPEC A-05), from ``model_capabilities.yaml``
or the file named by ``WEFT_MODEL_CAPABILITIES_FILE``."""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from weft_agent_config.definition import EFFORT_ORDER


@dataclass(frozen=True)
class ModelCapabilities:
    """Model-name patterns and their reasoning levels; first match wins."""

    entries: tuple[tuple[str, tuple[str, ...]], ...]

    @classmethod
    def load(cls, path: str | Path | None = None) -> ModelCapabilities:
        """Parse the shipped table, or ``path``; an unknown level fails the start."""
        if path:
            raw: Any = yaml.safe_load(Path(path).read_text())
        else:
            text = resources.files("weft_agent_config").joinpath("model_capabilities.yaml")
            raw = yaml.safe_load(text.read_text())
        entries = []
        for entry in raw["models"]:
            levels = tuple(entry.get("reasoning_efforts") or ())
            unknown = set(levels) - {*EFFORT_ORDER, "auto"}
            if unknown:
                raise ValueError(f"model {entry['match']!r}: unknown levels {sorted(unknown)}")
            entries.append((str(entry["match"]), levels))
        return cls(tuple(entries))

    def reasoning_levels(self, model: str) -> tuple[str, ...] | None:
        """The levels ``model`` accepts; None when no entry matches (no adjustment)."""
        for pattern, levels in self.entries:
            if fnmatchcase(model, pattern):
                return levels
        return None
