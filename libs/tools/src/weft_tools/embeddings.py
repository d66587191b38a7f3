"""Text embeddings through an OpenAI-compatible ``/embeddings`` endpoint (SPEC T-07).

The scripted LLM test double answers with deterministic vectors, so semantic search is
testable offline; a real deployment points ``WEFT_EMBEDDING_BASE_URL`` at its provider.
"""

from __future__ import annotations

import math
from typing import Protocol

from openai import AsyncOpenAI


class Embedder(Protocol):
    """Turns texts into vectors of one fixed size."""

    async def embed(self, texts: list[str]) -> list[list[float]]:
        """One vector per text, in order."""
        ...


class OpenAIEmbedder:
    """Embeddings with the ``openai`` client; batches of ``batch_size`` texts."""

    def __init__(
        self,
        *,
        base_url: str,
        api_key: str,
        model: str,
        dimensions: int | None = None,
        batch_size: int = 64,
    ):
        self._client = AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=2)
        self._model = model
        self._dimensions = dimensions
        self._batch = batch_size

    async def embed(self, texts: list[str]) -> list[list[float]]:
        """Vectors for ``texts``, L2-normalised so a dot product is the cosine."""
        vectors: list[list[float]] = []
        for start in range(0, len(texts), self._batch):
            batch = [t or " " for t in texts[start : start + self._batch]]
            if self._dimensions:
                response = await self._client.embeddings.create(
                    model=self._model, input=batch, dimensions=self._dimensions
                )
            else:
                response = await self._client.embeddings.create(model=self._model, input=batch)
            ordered = sorted(response.data, key=lambda d: d.index)
            vectors += [normalise(list(d.embedding)) for d in ordered]
        return vectors


def normalise(vector: list[float]) -> list[float]:
    """``vector`` scaled to length 1 (unchanged when zero)."""
    norm = math.sqrt(sum(x * x for x in vector))
    return [x / norm for x in vector] if norm else vector
