"""Word tokenisation, token estimates and the splitting of text into stream pieces."""

from __future__ import annotations

import math
import re

_WORD = re.compile(r"\w+", re.UNICODE)
_PIECE_BOUNDARY = re.compile(r"(?<=\s)(?=\S)")

_STOPWORD_TEXT = """
a an and are as at be by can do does for from how i in is it me my of on or please tell
that the this to was what when where which who why with you your
"""
STOPWORDS = frozenset(_STOPWORD_TEXT.split())


def words(text: str) -> list[str]:
    """Lower-cased words of `text`."""
    return [w.lower() for w in _WORD.findall(text)]


def keywords(text: str) -> set[str]:
    """Words of `text` that carry meaning (no stopwords, no one-letter words)."""
    return {w for w in words(text) if len(w) > 1 and w not in STOPWORDS}


def estimate_tokens(text: str) -> int:
    """The usual rough estimate: four characters a token."""
    return math.ceil(len(text) / 4)


def split_words(text: str, words_per_piece: int) -> list[str]:
    """Split `text` into pieces of a few words; joining the pieces gives `text` back."""
    parts = [p for p in _PIECE_BOUNDARY.split(text) if p]
    pieces = [
        "".join(parts[i : i + words_per_piece]) for i in range(0, len(parts), words_per_piece)
    ]
    return pieces or ([text] if text else [])


def split_chars(text: str, size: int) -> list[str]:
    """Split `text` into pieces of `size` characters (at least one piece, maybe empty)."""
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]
