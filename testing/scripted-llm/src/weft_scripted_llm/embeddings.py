"""Deterministic embeddings: a bag of hashed words, L2-normalised.

Texts sharing words get close vectors (cosine similarity grows with the overlap);
the same text always gets the same vector.
"""

from __future__ import annotations

import base64
import hashlib
import math
import struct
from typing import Any

from weft_scripted_llm.openai_schema import EmbeddingRequest
from weft_scripted_llm.tokens import estimate_tokens, words


def _bucket(token: str, dimensions: int) -> tuple[int, float]:
    digest = hashlib.blake2b(token.encode(), digest_size=8).digest()
    value = int.from_bytes(digest, "big")
    sign = 1.0 if (value >> 63) & 1 else -1.0
    return value % dimensions, sign


def embed_tokens(tokens: list[str], dimensions: int) -> list[float]:
    """The normalised sum of one signed hashed unit per token (empty input: the token '')."""
    vector = [0.0] * dimensions
    for token in tokens or [""]:
        index, sign = _bucket(token, dimensions)
        vector[index] += sign
    norm = math.sqrt(sum(x * x for x in vector)) or 1.0
    return [x / norm for x in vector]


def embed_text(text: str, dimensions: int) -> list[float]:
    return embed_tokens(words(text), dimensions)


def input_token_lists(request: EmbeddingRequest) -> list[list[str]]:
    """The inputs as token lists: words of texts, `t<id>` for token ids."""
    raw = request.input
    if isinstance(raw, str):
        return [words(raw)]
    items: list[Any] = list(raw)
    if items and all(isinstance(x, int) for x in items):
        return [[f"t{x}" for x in items]]
    return [words(x) if isinstance(x, str) else [f"t{i}" for i in x] for x in items]


def encode_vector(vector: list[float], encoding_format: str) -> list[float] | str:
    """Floats, or base64 of little-endian float32 (what the openai client asks for)."""
    if encoding_format == "base64":
        return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
    return vector


def embeddings_body(request: EmbeddingRequest, dimensions: int, model: str) -> dict[str, Any]:
    """The `list` of embeddings response."""
    size = request.dimensions or dimensions
    token_lists = input_token_lists(request)
    data = [
        {
            "object": "embedding",
            "index": index,
            "embedding": encode_vector(embed_tokens(tokens, size), request.encoding_format),
        }
        for index, tokens in enumerate(token_lists)
    ]
    prompt = sum(estimate_tokens(" ".join(tokens)) for tokens in token_lists)
    return {
        "object": "list",
        "data": data,
        "model": model,
        "usage": {"prompt_tokens": prompt, "total_tokens": prompt},
    }
