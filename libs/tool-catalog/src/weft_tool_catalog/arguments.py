"""Tool arguments as pydantic models: one source for a tool's schema, casting and checks.

A built-in tool declares its arguments as a :class:`ToolArguments` model. Its JSON Schema
(what the model is told, SPEC T-01), the casting of string spellings (SPEC T-02) and the
validation whose messages the model reads all follow from that schema, and the tool's
``run`` reads the validated model's typed attributes.

The schema is the model's, trimmed to what a hand-written tool schema says: no titles,
nested models inlined instead of ``$ref``, no class docstrings, and an optional argument
(``X | None = None``) declared as ``X`` that may be left out, not as "X or null".
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict


class ToolArguments(BaseModel):
    """Base of every tool's argument model: unknown arguments are refused (the schema's
    ``additionalProperties: false``) and a validated call cannot be changed by the tool."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def arguments_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The JSON Schema of ``model``'s arguments, as the model is told (SPEC T-01)."""
    raw = model.model_json_schema()
    definitions = {
        name: _undocumented(definition) for name, definition in raw.pop("$defs", {}).items()
    }
    raw = _undocumented(raw)
    schema: dict[str, Any] = _clean(_inline(raw, definitions))
    return schema


def _undocumented(schema: dict[str, Any]) -> dict[str, Any]:
    """A class's schema without its docstring: written for Weft's readers, not the model
    (an argument's own ``description`` is kept)."""
    return {key: value for key, value in schema.items() if key != "description"}


def _inline(node: Any, definitions: dict[str, Any]) -> Any:
    if isinstance(node, list):
        return [_inline(item, definitions) for item in node]
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref")
    if isinstance(ref, str):
        target = definitions[ref.rsplit("/", 1)[-1]]
        return _inline({**target, **{k: v for k, v in node.items() if k != "$ref"}}, definitions)
    return {key: _inline(value, definitions) for key, value in node.items()}


def _clean(node: Any) -> Any:
    if isinstance(node, list):
        return [_clean(item) for item in node]
    if not isinstance(node, dict):
        return node
    node = _without_null(node)
    cleaned: dict[str, Any] = {}
    for key, value in node.items():
        if key == "properties":  # a mapping of argument names, not a schema
            cleaned[key] = {name: _clean(schema) for name, schema in value.items()}
        elif (key == "title" and isinstance(value, str)) or (key == "default" and value is None):
            continue
        else:
            cleaned[key] = _clean(value)
    return cleaned


def _without_null(node: dict[str, Any]) -> dict[str, Any]:
    """``anyOf: [X, null]`` as ``X``: a missing argument is how a model leaves one out."""
    variants = node.get("anyOf")
    if not isinstance(variants, list):
        return node
    kept = [v for v in variants if v != {"type": "null"}]
    if len(kept) != 1 or len(kept) == len(variants):
        return node
    rest = {k: v for k, v in node.items() if k != "anyOf"}
    return {**kept[0], **rest}
