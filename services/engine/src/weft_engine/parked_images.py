"""A turn's data-URI images, parked in Redis beside its state (SPEC E-26).

An image sent as a data URI (up to 384 KiB decoded, about 512,000 characters) kept in
the turn's state, which every step loads and saves, would weigh on every step: four of
them would move 2 MB through Redis and pydantic each time. At the turn's start, every data URI
in its messages (the user's images, and those memory replays from history for a vision
model) and in ``images_to_describe`` is stored once in the hash
``weft:turn:<request id>:images`` and replaced by the reference
``weft-image://<request id>/<digest>``. :class:`ImageResolvingModel` puts the data back
into each model request, so the model reads what it read before. Any replica resolves a
reference (the turn is named in it); the hash lives as long as the turn's state (each
read renews its TTL) and is deleted with it (``TurnStore.delete``). URLs stay as they are.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable, Sequence
from typing import Any

from redis.asyncio import Redis
from weft_llm import ChatModel, LLMCallError, LLMRequest, LLMResponse, StreamSink

from weft_engine.keys import images_key

REF_SCHEME = "weft-image://"


def _ref(request_id: str, digest: str) -> str:
    return f"{REF_SCHEME}{request_id}/{digest}"


def _image_urls(message: dict[str, Any]) -> list[str]:
    """The URLs of the message's image parts."""
    content = message.get("content")
    if not isinstance(content, list):
        return []
    return [p["image_url"]["url"] for p in content if _is_image(p)]


def _map_images(message: dict[str, Any], url_of: Callable[[str], str]) -> dict[str, Any]:
    """``message`` with each image part's URL passed through ``url_of`` (the same object
    when it has no image part)."""
    if not _image_urls(message):
        return message
    parts = [
        {**p, "image_url": {**p["image_url"], "url": url_of(p["image_url"]["url"])}}
        if _is_image(p)
        else p
        for p in message["content"]
    ]
    return {**message, "content": parts}


def _is_image(part: Any) -> bool:
    """An OpenAI image part, ``{"type": "image_url", "image_url": {"url": ...}}``."""
    return (
        isinstance(part, dict)
        and part.get("type") == "image_url"
        and isinstance(part.get("image_url"), dict)
        and isinstance(part["image_url"].get("url"), str)
    )


def _refs_by_turn(messages: Sequence[dict[str, Any]]) -> dict[str, list[str]]:
    """The digests referenced in the image parts of ``messages``, by request id."""
    by_turn: dict[str, list[str]] = {}
    for message in messages:
        for url in _image_urls(message):
            if url.startswith(REF_SCHEME):
                request_id, digest = url.removeprefix(REF_SCHEME).rsplit("/", 1)
                by_turn.setdefault(request_id, []).append(digest)
    return by_turn


class ParkedImages:
    """Parks a turn's data-URI images in Redis and puts them back on demand."""

    def __init__(self, redis: Redis, ttl_s: int):
        self._redis = redis
        self._ttl = ttl_s

    async def park(
        self, request_id: str, messages: list[dict[str, Any]], images: list[str]
    ) -> tuple[list[dict[str, Any]], list[str]]:
        """``messages`` and ``images`` with every data URI replaced by a reference, the
        data stored (one round trip, none without a data URI)."""
        parked: dict[str, str] = {}

        def park_one(url: str) -> str:
            if not url.startswith("data:"):
                return url
            digest = hashlib.sha256(url.encode()).hexdigest()[:32]
            parked[digest] = url
            return _ref(request_id, digest)

        new_messages = [_map_images(m, park_one) for m in messages]
        new_images = [park_one(url) for url in images]
        if parked:
            key = images_key(request_id)
            async with self._redis.pipeline(transaction=False) as pipe:
                pipe.hset(key, mapping=parked)  # type: ignore[arg-type]
                pipe.expire(key, self._ttl)
                await pipe.execute()
        return new_messages, new_images

    async def resolve(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """``messages`` with their references replaced by the parked data (the same list
        without any reference); ``LLMCallError`` when some data is no longer stored."""
        by_turn = _refs_by_turn(messages)
        if not by_turn:
            return messages
        async with self._redis.pipeline(transaction=False) as pipe:
            for request_id, digests in by_turn.items():
                pipe.hmget(images_key(request_id), digests)
                pipe.expire(images_key(request_id), self._ttl)
            replies = await pipe.execute()
        found: dict[str, str] = {}
        for (request_id, digests), values in zip(by_turn.items(), replies[::2], strict=True):
            for digest, value in zip(digests, values, strict=True):
                if value is None:
                    raise LLMCallError("an image of this turn is no longer stored", transient=False)
                url = value.decode() if isinstance(value, bytes) else value
                found[_ref(request_id, digest)] = url
        return [_map_images(m, lambda url: found.get(url, url)) for m in messages]


class ImageResolvingModel:
    """The engine's ``ChatModel``: parked images put back into every request (the turn's
    thinks, the VLM's descriptions, compaction and query rewrite all go through it)."""

    def __init__(self, model: ChatModel, images: ParkedImages):
        self._model = model
        self._images = images

    async def stream(self, request: LLMRequest, sink: StreamSink) -> LLMResponse:
        """Resolve, then stream through the wrapped model."""
        messages = await self._images.resolve(request.messages)
        if messages is not request.messages:
            request = dataclasses.replace(request, messages=messages)
        return await self._model.stream(request, sink)
