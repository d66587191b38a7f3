"""How a service reads a message written by another version of Weft: the rule that lets
services be upgraded one at a time (a rolling deploy, tool workers scaled and upgraded on
their own, other platform services subscribed to the agent events).

- Within one ``SCHEMA_VERSION`` the shapes only grow: a field is added with a default,
  never removed, renamed or retyped. Anything else is a breaking change, which bumps
  ``SCHEMA_VERSION``.
- A reader ignores the fields it does not know: an older consumer reads a newer
  producer's message as the shape it knows (the new fields keep their meaning only for
  readers that know them).
- A reader refuses a message of a newer ``schema_version`` than its own
  (:class:`UnsupportedSchemaVersion`) rather than guess at it: the bus dead-letters it
  with that reason, to be replayed once the consumer is upgraded.

Writers stay strict: the models forbid unknown fields, so a misspelt field in Weft's own
code is an error where the message is built, not a silently dropped value.
"""

from __future__ import annotations

import json
from typing import Any, TypeVar

from pydantic import TypeAdapter, ValidationError

from weft_contracts.envelope import SCHEMA_VERSION

T = TypeVar("T")


class UnsupportedSchemaVersion(ValueError):
    """The message is of a newer ``schema_version`` than this reader knows."""

    def __init__(self, version: int):
        super().__init__(
            f"message schema_version {version}; this reader knows up to {SCHEMA_VERSION}"
        )
        self.version = version


def read_json(adapter: TypeAdapter[T], body: str | bytes) -> T:
    """``body`` decoded by ``adapter`` as a reader of the rule above: unknown fields
    ignored, a newer ``schema_version`` refused. Raises ``ValidationError`` for a body
    that is not the known shape and :class:`UnsupportedSchemaVersion` for a newer one
    (also when that newer message does not fit the known shape)."""
    try:
        message = adapter.validate_json(body, extra="ignore")
    except ValidationError:
        _refuse_newer(_peek_version(body))
        raise
    _refuse_newer(getattr(message, "schema_version", None))
    return message


def _refuse_newer(version: Any) -> None:
    if isinstance(version, int) and not isinstance(version, bool) and version > SCHEMA_VERSION:
        raise UnsupportedSchemaVersion(version)


def _peek_version(body: str | bytes) -> Any:
    """The ``schema_version`` of a body that failed validation, if it has one."""
    try:
        value = json.loads(body)
    except ValueError:
        return None
    return value.get("schema_version") if isinstance(value, dict) else None
