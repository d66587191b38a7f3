"""Text embeddings through an OpenAI-compatible ``/embeddings`` endpoint (SPEC T-07).

The scripted LLM test double answers with deterministic vectors, so semantic search is
testable offline; a real deployment points ``WEFT_EMBEDDING_BASE_URL`` at its provider.
"""

from __future__ import annotations

import math
from typing import Protocol, runtime_checkable

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
        vectors, _ = await self.embed_counted(texts)
        return vectors

    async def embed_counted(self, texts: list[str]) -> tuple[list[list[float]], int]:
        """(vectors for ``texts``, input tokens the provider counted; estimated for a
        response without usage)."""
        vectors: list[list[float]] = []
        tokens = 0
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
            usage = getattr(response, "usage", None)
            counted = getattr(usage, "prompt_tokens", None)
            tokens += counted if isinstance(counted, int) else estimate_tokens(batch)
        return vectors, tokens


@runtime_checkable
class CountingEmbedder(Protocol):
    """An embedder that also tells the input tokens a call cost (what is metered)."""

    async def embed_counted(self, texts: list[str]) -> tuple[list[list[float]], int]:
        """(one vector per text, input tokens)."""
        ...


def estimate_tokens(texts: list[str]) -> int:
    """Input tokens of ``texts`` when the provider does not say: one per four
    characters, at least one a text (the token estimator's fallback)."""
    return sum(max(1, len(t) // 4) for t in texts)


async def embed_counted(embedder: Embedder, texts: list[str]) -> tuple[list[list[float]], int]:
    """(vectors, input tokens) of ``texts`` from any embedder: the provider's count when
    it reports one (:class:`CountingEmbedder`), else an estimate."""
    if isinstance(embedder, CountingEmbedder):
        return await embedder.embed_counted(texts)
    return await embedder.embed(texts), estimate_tokens(texts)


def normalise(vector: list[float]) -> list[float]:
    """``vector`` scaled to length 1 (unchanged when zero)."""
    norm = math.sqrt(sum(x * x for x in vector))
    return [x / norm for x in vector] if norm else vector
