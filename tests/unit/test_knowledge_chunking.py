"""Chunking with overlap and the keyword query builder."""

from __future__ import annotations

import itertools

import pytest
from weft_storage.knowledge.store import keyword_tsquery, split_into_chunks


def test_chunks_overlap_and_cover_the_text() -> None:
    text = " ".join(f"word{i}" for i in range(1000))
    chunks = split_into_chunks(text, size=300, overlap=60)
    assert len(chunks) > 3
    assert all(len(c) <= 300 for c in chunks)
    for previous, current in itertools.pairwise(chunks):
        assert previous[-40:].split()[-1] in current  # the overlap carries words across
    assert chunks[0].startswith("word0") and chunks[-1].endswith("word999")


def test_short_text_is_one_chunk() -> None:
    assert split_into_chunks("  hello world  ") == ["hello world"]


def test_overlap_must_be_smaller_than_size() -> None:
    with pytest.raises(ValueError):
        split_into_chunks("x", size=10, overlap=10)


def test_keyword_query_is_an_or_of_sanitised_words() -> None:
    assert keyword_tsquery("What's the refund policy?") == "policy | refund | the | what"
    assert keyword_tsquery("'); DROP TABLE chunks; --") == "chunks | drop | table"
    assert keyword_tsquery("?!") == ""
