"""Why a tool an MCP server lists is refused (SPEC T-19): the server is the tenant's, not
Weft's, so its names and schemas are untrusted input the model will be shown.

A refused tool is kept and shown with its problem, never offered nor called.
"""

from __future__ import annotations

import json
import re
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from weft_contracts.mcp import MAX_SCHEMA_BYTES

SERVER_TOOL_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")
"""What the MCP specification allows as a tool name."""

MAX_SCHEMA_DEPTH = 32
"""Nesting of objects and arrays a schema may have."""


def name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a tool's name, or None."""
    if SERVER_TOOL_NAME.fullmatch(name):
        return None
    return "the tool name must be 1-128 characters of A-Z a-z 0-9 _ - ."


def schema_problem(schema: Any) -> str | None:
    """Why ``schema`` cannot be offered as a tool's parameters, or None: not an object
    schema, not valid JSON Schema, larger than :data:`MAX_SCHEMA_BYTES`, nested deeper
    than :data:`MAX_SCHEMA_DEPTH`, a ``$ref`` outside the schema or a recursive one."""
    if not isinstance(schema, dict):
        return "the input schema is not a JSON object"
    try:
        size = len(json.dumps(schema, separators=(",", ":"), ensure_ascii=False).encode())
    except (TypeError, ValueError, RecursionError):
        return "the input schema cannot be serialised as JSON"
    if size > MAX_SCHEMA_BYTES:
        return f"the input schema has {size} bytes; at most {MAX_SCHEMA_BYTES} are accepted"
    if _depth(schema) > MAX_SCHEMA_DEPTH:
        return f"the input schema is nested deeper than {MAX_SCHEMA_DEPTH} levels"
    if schema.get("type", "object") != "object":
        return "the input schema must describe an object (type: object)"
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        return f"the input schema is not valid JSON Schema: {exc.message[:200]}"
    return _ref_problem(schema)


def _depth(value: Any) -> int:
    # Iterative: a hostile schema must not exhaust Python's recursion limit here.
    deepest, stack = 0, [(value, 1)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        if depth > MAX_SCHEMA_DEPTH:
            return depth
        children = node.values() if isinstance(node, dict) else node
        if isinstance(node, dict | list):
            stack.extend((child, depth + 1) for child in children)
    return deepest


def _refs(node: Any) -> list[str]:
    found: list[str] = []
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            for key in ("$ref", "$dynamicRef", "$recursiveRef"):
                if isinstance(item.get(key), str):
                    found.append(item[key])
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return found


def _resolve(schema: dict[str, Any], ref: str) -> Any:
    node: Any = schema
    for part in ref.removeprefix("#").split("/")[1:]:
        key = part.replace("~1", "/").replace("~0", "~")
        node = node.get(key) if isinstance(node, dict) else None
    return node


def _ref_problem(schema: dict[str, Any]) -> str | None:
    """Local refs only, and no cycle among them (a recursive schema has no finite
    definition a model's tools API can take)."""
    for ref in _refs(schema):
        if not ref.startswith("#"):
            return f"the input schema refers outside itself ({ref[:100]!r})"
    visiting: set[str] = set()
    done: set[str] = set()

    def cyclic(ref: str) -> bool:
        if ref in done:
            return False
        if ref in visiting or ref == "#" or ref == "":
            return True
        visiting.add(ref)
        target = _resolve(schema, ref)
        if target is None:
            return False
        if any(cyclic(inner) for inner in _refs(target)):
            return True
        visiting.discard(ref)
        done.add(ref)
        return False

    for ref in _refs(schema):
        if cyclic(ref):
            return "the input schema is recursive ($ref cycle); recursive schemas are not offered"
    return None
