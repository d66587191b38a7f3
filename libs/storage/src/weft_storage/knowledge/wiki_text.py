"""Slugs and links of wiki pages (SPEC T-18): what a slug may be, and the ``[[slug]]``
links a page's content holds.

A slug is lower-case words of letters and digits joined by ``-``, in at most
:data:`MAX_SEGMENTS` segments separated by ``/`` (``product/stardust``). Normalising
lower-cases it and turns spaces and ``_`` into ``-``; anything else (``..``, a leading
``/``, a backslash, ``%``, control characters) is refused, not cleaned: a slug that only
looks like a path after cleaning must not name another page.
"""

from __future__ import annotations

import re
import unicodedata

MAX_SLUG_CHARS = 200
MAX_SEGMENTS = 4
_SEGMENT = re.compile(r"^[^\W_](?:[^\W_]|-(?=[^\W_]))*$")
LINK = re.compile(r"\[\[([^\[\]|\n]{1,200})(\|[^\[\]\n]{0,200})?\]\]")
"""``[[slug]]`` or ``[[slug|label]]``."""


class InvalidSlug(ValueError):
    """A slug the wiki refuses; ``str()`` says why (safe to show a model)."""


def normalize_slug(raw: str) -> str:
    """The slug ``raw`` names, or :class:`InvalidSlug`."""
    text = unicodedata.normalize("NFKC", raw).strip().lower()
    text = re.sub(r"[\s_]+", "-", text)
    if not text:
        raise InvalidSlug("a slug may not be empty")
    if len(text) > MAX_SLUG_CHARS:
        raise InvalidSlug(f"a slug has at most {MAX_SLUG_CHARS} characters")
    segments = text.split("/")
    if len(segments) > MAX_SEGMENTS:
        raise InvalidSlug(f"a slug has at most {MAX_SEGMENTS} segments separated by '/'")
    for segment in segments:
        if not _SEGMENT.match(segment):
            raise InvalidSlug(
                f"invalid slug {raw[:80]!r}: use letters, digits and single '-' between "
                "them, segments separated by '/'"
            )
    return text


def linked_slugs(content: str) -> list[str]:
    """The slugs ``content`` links to, in order, once each (invalid targets skipped)."""
    found: dict[str, None] = {}
    for match in LINK.finditer(content):
        try:
            found[normalize_slug(match.group(1))] = None
        except InvalidSlug:
            continue
    return list(found)


def relink(content: str, old: str, new: str | None, title: str = "") -> str:
    """``content`` with its links to ``old`` pointing at ``new``; with ``new`` None, each
    such link becomes its label (or ``title``, else the slug) as plain text."""

    def swap(match: re.Match[str]) -> str:
        try:
            target = normalize_slug(match.group(1))
        except InvalidSlug:
            return match.group(0)
        if target != old:
            return match.group(0)
        label = match.group(2) or ""
        if new is not None:
            return f"[[{new}{label}]]"
        return label[1:] if label else (title or old)

    return LINK.sub(swap, content)


def search_text(slug: str, title: str, aliases: list[str], summary: str, content: str) -> str:
    """What ``wiki_search`` matches a page on, lower-cased in one column."""
    return "\n".join([slug, title, *aliases, summary, content]).lower()
