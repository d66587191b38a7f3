"""The reranker's and MMR's stemmer is Snowball's C build (PyStemmer), not the pure-Python
one: the same stems (PostgreSQL's ``english`` configuration), about 250x less CPU; the
pure-Python build made stemming half of a search's time (bench/knowledge_search.py)."""

from __future__ import annotations

import Stemmer
from snowballstemmer.english_stemmer import EnglishStemmer
from weft_tools import ranking


def test_the_ranking_stemmer_is_the_c_build() -> None:
    # snowballstemmer hands out PyStemmer's class when it is installed, and silently its
    # own pure-Python class when it is not: a packaging slip would go unnoticed.
    assert isinstance(ranking._STEMMER, Stemmer.Stemmer)


def test_the_c_build_stems_as_the_python_build_does() -> None:
    words = ["refunded", "refunds", "running", "generously", "accounts", "security",
             "retention", "auditing", "passwords", "contracting", "happily", "skies"]  # fmt: skip
    assert ranking._STEMMER.stemWords(words) == EnglishStemmer().stemWords(words)
    assert ranking.stems("Refunded accounts") == {"refund", "account"}
