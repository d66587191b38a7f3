"""What each model can do, from ``model_capabilities.yaml`` or the file named by
``WEFT_MODEL_CAPABILITIES_FILE``: its reasoning levels (SPEC A-05) and whether it reads
images (vision routing, SPEC E-26)."""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from weft_agent_config.definition import EFFORT_ORDER


@dataclass(frozen=True)
class ModelEntry:
    """One row of the table: a model-name pattern and what those models can do."""

    match: str
    reasoning_efforts: tuple[str, ...] | None
    """None: the row does not say (levels unknown, efforts pass unadjusted); empty: the
    model does not reason."""
    vision: bool = False


@dataclass(frozen=True)
class ModelCapabilities:
    """Model-name patterns and their capabilities; first match wins."""

    entries: tuple[ModelEntry, ...]

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
            levels: tuple[str, ...] | None = None  # the row does not say: unknown
            if "reasoning_efforts" in entry:
                levels = tuple(entry["reasoning_efforts"] or ())
            unknown = set(levels or ()) - {*EFFORT_ORDER, "auto"}
            if unknown:
                raise ValueError(f"model {entry['match']!r}: unknown levels {sorted(unknown)}")
            vision = entry.get("vision", False)
            if not isinstance(vision, bool):
                raise ValueError(f"model {entry['match']!r}: vision must be true or false")
            entries.append(ModelEntry(str(entry["match"]), levels, vision))
        return cls(tuple(entries))

    def _entry(self, model: str) -> ModelEntry | None:
        return next((e for e in self.entries if fnmatchcase(model, e.match)), None)

    def reasoning_levels(self, model: str) -> tuple[str, ...] | None:
        """The levels ``model`` accepts; None when they are unknown (no entry matches, or
        the matching row leaves them out): no adjustment, nothing added."""
        entry = self._entry(model)
        return entry.reasoning_efforts if entry else None

    def supports_vision(self, model: str) -> bool:
        """Whether ``model`` takes image parts; a model no entry names does not (E-26)."""
        entry = self._entry(model)
        return entry.vision if entry else False
