"""A user's locale: a BCP 47 language tag as clients send it (``en``, ``fr-CA``,
``zh-Hant-TW``), and how the gateway reads one from ``Accept-Language``.

The tag travels with the turn (``ChatRequested`` -> ``turn_started``) so that what is made
for the user after the answer, such as suggested follow-up questions (SPEC Q-04 keys a set
by locale), is made in the user's language rather than in a deployment-wide one.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import StringConstraints

LOCALE_PATTERN = r"^[A-Za-z]{2,3}(-[A-Za-z0-9]{1,8}){0,4}$"
"""A primary language subtag, then at most four subtags (script, region, variant...)."""

Locale = Annotated[str, StringConstraints(max_length=35, pattern=LOCALE_PATTERN)]

_TAG = re.compile(LOCALE_PATTERN)
_MAX_HEADER = 1000


def preferred_locale(accept_language: str | None) -> str | None:
    """The tag of highest weight in an ``Accept-Language`` header (RFC 9110 12.5.4), or
    None when it names none that is valid (``*``, ``q=0``, junk, an oversized header).
    Ties keep the header's order."""
    if not accept_language or len(accept_language) > _MAX_HEADER:
        return None
    best: tuple[float, int, str] | None = None
    for index, item in enumerate(accept_language.split(",")):
        tag, _, params = item.strip().partition(";")
        tag = tag.strip()
        if not _TAG.fullmatch(tag):
            continue
        weight = _weight(params)
        if weight <= 0:
            continue
        candidate = (-weight, index, tag)
        if best is None or candidate < best:
            best = candidate
    return None if best is None else best[2]


def _weight(params: str) -> float:
    for param in params.split(";"):
        name, _, value = param.strip().partition("=")
        if name.strip().lower() == "q":
            try:
                weight = float(value.strip())
            except ValueError:
                return 0.0
            return weight if 0.0 <= weight <= 1.0 else 0.0
    return 1.0
