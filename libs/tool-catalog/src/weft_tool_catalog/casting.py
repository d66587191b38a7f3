"""CastParams (SPEC T-02): coerce string arguments to the types their schema declares.

Models often send ``"true"`` or ``"10"`` where the schema wants a boolean or an integer.
Casting happens before JSON Schema validation so such calls succeed, while a value that
cannot be cast is left untouched for the validator to report.
"""

from __future__ import annotations

import json
from typing import Any

_TRUE = frozenset({"true", "yes", "1", "on"})
_FALSE = frozenset({"false", "no", "0", "off"})


def cast_arguments(arguments: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``arguments`` with each top-level value cast to its declared type."""
    properties = schema.get("properties") or {}
    return {
        key: cast_value(value, properties[key]) if key in properties else value
        for key, value in arguments.items()
    }


def cast_value(value: Any, schema: dict[str, Any]) -> Any:
    """``value`` cast to ``schema``'s type when it is a string spelling of that type."""
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), None)
    if kind == "array" and isinstance(value, list):
        items = schema.get("items") or {}
        return [cast_value(v, items) for v in value]
    if kind == "object" and isinstance(value, dict):
        return cast_arguments(value, schema)
    if not isinstance(value, str):
        return _widen(value, kind)
    cast = _cast_string(value.strip(), kind, fallback=value)
    if kind in ("array", "object") and cast is not value:
        return cast_value(cast, schema)  # JSON text: its items are cast like a list's
    return cast


def _widen(value: Any, kind: Any) -> Any:
    # An integral float (3.0) is a valid integer argument. Numbers are not turned into
    # strings: a wrong type there is more likely a confused call the model should see.
    if kind == "integer" and isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _cast_string(text: str, kind: Any, *, fallback: str) -> Any:
    try:
        if kind == "boolean" and text.lower() in _TRUE | _FALSE:
            return text.lower() in _TRUE
        if kind == "integer":
            number = float(text)
            return int(number) if number.is_integer() else fallback
        if kind == "number":
            return float(text)
        if kind in ("array", "object") and text[:1] in "[{":
            return json.loads(text)
    except ValueError:
        return fallback
    return fallback
