"""Reading knowledge-base search results and composing a cited answer from them.

Used by the demo policy. Tolerant by design: the tool output may be JSON with a
`results` list, JSON buried in text, or plain lines.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from weft_scripted_llm.tokens import keywords

MAX_CITED = 3
MAX_SENTENCE_WORDS = 40
_RESULT_KEYS = ("results", "chunks", "hits", "documents", "items", "data")
_ID_KEYS = ("id", "chunk_id", "chunk")
_TITLE_KEYS = ("document_title", "title", "doc_title", "source", "doc", "document_id")
_CONTENT_KEYS = ("content", "text", "snippet", "chunk_text", "body")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_LINE_WITH_ID = re.compile(r"^\[(?P<id>[^\]]+)\]\s*(?P<text>.*)$")


@dataclass(frozen=True)
class SearchHit:
    """One chunk returned by the knowledge-base search."""

    id: str
    title: str
    content: str


def parse_search_hits(tool_output: str) -> list[SearchHit]:
    """The hits in a search tool's output; JSON first, then JSON inside text, then lines."""
    data = _decode_json(tool_output)
    if data is None:
        return _hits_from_lines(tool_output)
    return [_hit_from(item, n) for n, item in enumerate(_result_items(data), start=1)]


def _decode_json(text: str) -> Any:
    candidates = [text, text[text.find("{") : text.rfind("}") + 1]]
    for candidate in candidates:
        try:
            data = json.loads(candidate)
        except ValueError:
            continue
        return _decode_json(data) if isinstance(data, str) else data
    return None


def _result_items(data: Any) -> list[dict[str, Any]]:
    if isinstance(data, list):
        return [item for item in data if isinstance(item, dict)]
    if isinstance(data, dict):
        for key in _RESULT_KEYS:
            if isinstance(data.get(key), list):
                return _result_items(data[key])
    return []


def _first_text(item: dict[str, Any], keys: tuple[str, ...]) -> str:
    for key in keys:
        value = item.get(key)
        if value not in (None, ""):
            return str(value)
    return ""


def _hit_from(item: dict[str, Any], number: int) -> SearchHit:
    return SearchHit(
        id=_first_text(item, _ID_KEYS) or f"r{number}",
        title=_first_text(item, _TITLE_KEYS),
        content=_first_text(item, _CONTENT_KEYS),
    )


def _hits_from_lines(text: str) -> list[SearchHit]:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    hits = []
    for number, line in enumerate(lines, start=1):
        found = _LINE_WITH_ID.match(line)
        hit_id, content = (found["id"], found["text"]) if found else (f"r{number}", line)
        hits.append(SearchHit(id=hit_id, title="", content=content))
    return hits


def overlap(question: str, text: str) -> int:
    """How many meaningful words of `question` occur in `text`."""
    return len(keywords(question) & keywords(text))


def best_hits(question: str, hits: list[SearchHit]) -> list[SearchHit]:
    """Up to three hits overlapping the question most (at least half the best overlap)."""
    scored = sorted(
        ((overlap(question, f"{h.title} {h.content}"), n, h) for n, h in enumerate(hits)),
        key=lambda entry: (-entry[0], entry[1]),
    )
    best = scored[0][0] if scored else 0
    chosen = [h for score, _, h in scored if score > 0 and 2 * score >= best]
    return chosen[:MAX_CITED] or hits[:1]


def key_sentence(question: str, content: str) -> str:
    """The sentence of `content` overlapping the question most, at most 40 words."""
    sentences = [s.strip() for s in _SENTENCE_END.split(content) if s.strip()] or [""]
    sentence = max(sentences, key=lambda s: overlap(question, s))
    sentence_words = sentence.split()
    if len(sentence_words) > MAX_SENTENCE_WORDS:
        return " ".join(sentence_words[:MAX_SENTENCE_WORDS]) + "..."
    return sentence


def cite(sentence: str, hit_id: str) -> str:
    """`sentence` with the citation `[hit_id]` before its final punctuation."""
    end = sentence[-1] if sentence and sentence[-1] in ".!?" else "."
    body = sentence.rstrip(".!? ") if sentence else "(empty result)"
    return f"{body} [{hit_id}]{end}"


def sources_line(hits: list[SearchHit]) -> str:
    """`Sources: [c1] Title; [c2] Title` for the cited hits."""
    entries = [f"[{h.id}] {h.title}".strip() for h in hits]
    return "Sources: " + "; ".join(entries)


def cited_answer(question: str, hits: list[SearchHit]) -> str:
    """A short answer condensing the best hits, each sentence cited, then the sources."""
    if not hits:
        topic = f'"{question}"' if question else "that"
        return f"The knowledge base has nothing on {topic}."
    chosen = best_hits(question, hits)
    sentences = " ".join(cite(key_sentence(question, h.content), h.id) for h in chosen)
    return f"From the knowledge base: {sentences}\n\n{sources_line(chosen)}"


def answer_reasoning(hits: list[SearchHit], question: str) -> str:
    """The short reasoning shown before the cited answer."""
    if not hits:
        return "The search returned no results, so I will say the knowledge base has nothing."
    ids = ", ".join(h.id for h in best_hits(question, hits))
    return f"The search returned {len(hits)} result(s); I will answer from {ids} and cite them."
