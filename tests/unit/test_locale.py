"""The user's locale (SPEC Q-04 keys a suggestion set by it): read from the request body or
``Accept-Language``, validated as a BCP 47 tag, and never a reason to refuse a turn when
only the header is unreadable."""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from weft_contracts import preferred_locale
from weft_gateway.api import ChatBody


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ("fr-CA,fr;q=0.9,en;q=0.8", "fr-CA"),
        ("en;q=0.5, de", "de"),  # weight, not order, decides
        ("da, en-GB;q=0.8", "da"),
        ("zh-Hant-TW", "zh-Hant-TW"),
        ("*, es;q=0.1", "es"),  # the wildcard names no language
        ("fr;q=0, it;q=0.2", "it"),  # q=0 means "not this one"
        ("en;q=0.7, fr;q=0.7", "en"),  # a tie keeps the header's order
        ("", None),
        (None, None),
        ("x, 12, ../etc", None),
        ("en;q=abc", None),
        ("en;q=2", None),
        ("a" * 2000, None),
    ],
)
def test_the_preferred_locale_of_an_accept_language_header(
    header: str | None, expected: str | None
) -> None:
    assert preferred_locale(header) == expected


@pytest.mark.parametrize("locale", ["fr", "pt-BR", "sr-Latn-RS"])
def test_a_chat_body_takes_a_language_tag(locale: str) -> None:
    assert ChatBody(query="hi", locale=locale).locale == locale


@pytest.mark.parametrize("locale", ["", "french!", "en_US", "e", "en-" + "x" * 40, "en\n"])
def test_a_chat_body_refuses_what_is_not_a_language_tag(locale: str) -> None:
    with pytest.raises(ValidationError, match="locale"):
        ChatBody(query="hi", locale=locale)
