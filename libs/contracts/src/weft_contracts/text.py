"""Text that can be stored and sent: no NUL character, no lone UTF-16 surrogate.

PostgreSQL ``text`` and ``jsonb`` cannot hold U+0000, and a lone surrogate (what the JSON
escape ``"\\ud800"`` decodes to when no low surrogate follows) cannot be encoded as UTF-8,
so either one makes a database write, a Kafka publish (``model_dump_json``) or an HTTP
answer fail. Two policies, one rule:

* input from API callers is refused with a reason (:func:`find_unstorable`, used by the
  services' request guard), so nothing is silently changed;
* text Weft itself relays from elsewhere (a model's output, a tool's output, a fetched
  page) is cleaned (:func:`clean_text`, :data:`CleanText`): NUL characters are dropped,
  lone surrogates become U+FFFD, the rest is kept.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import AfterValidator

_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
_SURROGATE = re.compile("[\ud800-\udfff]")
REPLACEMENT = "\ufffd"

Location = tuple[str | int, ...]


def unstorable_reason(text: str) -> str | None:
    """Why ``text`` cannot be stored, or None when it can."""
    found = _UNSTORABLE.search(text)
    if found is None:
        return None
    if found.group() == "\x00":
        return "contains a NUL character (\\u0000), which cannot be stored"
    return (
        f"contains a lone UTF-16 surrogate (\\u{ord(found.group()):04x}) that is not "
        "valid Unicode text"
    )


def find_unstorable(value: Any, loc: Location = ()) -> tuple[Location, str] | None:
    """The first string (dict keys included) in a decoded JSON value that cannot be
    stored, with its location, e.g. ``(("title",), "contains a NUL ...")``."""
    if isinstance(value, str):
        reason = unstorable_reason(value)
        return None if reason is None else (loc, reason)
    if isinstance(value, dict):
        for key, item in value.items():
            here = (*loc, key) if isinstance(key, str) else loc
            if isinstance(key, str) and (reason := unstorable_reason(key)) is not None:
                return here, f"key {reason}"
            if (found := find_unstorable(item, here)) is not None:
                return found
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            if (found := find_unstorable(item, (*loc, index))) is not None:
                return found
    return None


def clean_text(text: str) -> str:
    """``text`` without NUL characters and with lone surrogates replaced by U+FFFD."""
    if _UNSTORABLE.search(text) is None:
        return text
    return _SURROGATE.sub(REPLACEMENT, text.replace("\x00", ""))


def clean_json(value: Any) -> Any:
    """``value`` (a decoded JSON value) with every string, keys included, cleaned."""
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, dict):
        return {clean_json(k): clean_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [clean_json(item) for item in value]
    return value


CleanText = Annotated[str, AfterValidator(clean_text)]
"""A string field whose value is cleaned on validation (text relayed from elsewhere)."""

CleanJson = Annotated[dict[str, Any], AfterValidator(clean_json)]
"""A JSON object field whose strings are cleaned on validation."""
