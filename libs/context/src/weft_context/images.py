"""How a user message's images are written for a model (SPEC E-26), shared by the engine
(the current turn) and memory (history): image parts for a model with vision, a
delimited block of descriptions for one without."""

from __future__ import annotations

from collections.abc import Sequence

from weft_llm import ContentPart

UNREADABLE = "(this image could not be read)"


def multimodal_content(text: str, images: Sequence[str]) -> list[ContentPart]:
    """OpenAI content parts: the text, then each image."""
    parts: list[ContentPart] = [{"type": "text", "text": text}]
    parts += [{"type": "image_url", "image_url": {"url": url}} for url in images]
    return parts


def descriptions_block(descriptions: Sequence[str | None], note: str = "") -> str:
    """What a model without vision reads in place of the images."""
    lines = [
        f"Image {n}: {(text or '').strip() or UNREADABLE}" for n, text in enumerate(descriptions, 1)
    ]
    block = "<image_descriptions>\n" + "\n".join(lines) + "\n</image_descriptions>"
    return f"{block}\n{note}" if note else block


def content_text(content: str | Sequence[ContentPart] | None) -> str:
    """The text of a message's content, plain or multimodal (image parts left out)."""
    if content is None or isinstance(content, str):
        return content or ""
    return "\n\n".join(p["text"] for p in content if p["type"] == "text")
