"""A turn's data-URI images, parked in Redis beside its state (SPEC E-26).

An image sent as a data URI (up to 384 KiB decoded, about 512,000 characters) kept in the
turn's state, which every step loads and saves, would move 2 MB for four of them
through Redis and pydantic at each step of the turn. At the turn's start, every data URI
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

from redis.asyncio import Redis
from redis.typing import EncodableT, FieldT
from weft_llm import (
    ChatMessage,
    ChatModel,
    ContentPart,
    LLMCallError,
    LLMRequest,
    LLMResponse,
    StreamSink,
)

from weft_engine.keys import images_key

REF_SCHEME = "weft-image://"


def _ref(request_id: str, digest: str) -> str:
    return f"{REF_SCHEME}{request_id}/{digest}"


def _image_urls(message: ChatMessage) -> list[str]:
    """The URLs of the message's image parts (only a user message has parts)."""
    if message["role"] != "user" or isinstance(message["content"], str):
        return []
    return [p["image_url"]["url"] for p in message["content"] if p["type"] == "image_url"]


def _map_part(part: ContentPart, url_of: Callable[[str], str]) -> ContentPart:
    if part["type"] != "image_url":
        return part
    return {**part, "image_url": {**part["image_url"], "url": url_of(part["image_url"]["url"])}}


def _map_images(message: ChatMessage, url_of: Callable[[str], str]) -> ChatMessage:
    """``message`` with each image part's URL passed through ``url_of`` (the same object
    when it has no image part)."""
    if message["role"] != "user" or not _image_urls(message):
        return message
    content = message["content"]
    parts = content if isinstance(content, str) else [_map_part(p, url_of) for p in content]
    return {**message, "content": parts}


def _refs_by_turn(messages: Sequence[ChatMessage]) -> dict[str, list[str]]:
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
        self, request_id: str, messages: list[ChatMessage], images: list[str]
    ) -> tuple[list[ChatMessage], list[str]]:
        """``messages`` and ``images`` with every data URI replaced by a reference, the
        data stored (one round trip, none without a data URI)."""
        # typed as redis-py's hash mapping (its key type is invariant): digest -> data URI
        parked: dict[FieldT, EncodableT] = {}

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
                pipe.hset(key, mapping=parked)
                pipe.expire(key, self._ttl)
                await pipe.execute()
        return new_messages, new_images

    async def resolve(self, messages: Sequence[ChatMessage]) -> Sequence[ChatMessage]:
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
                    raise LLMCallError("an image of this turn is no longer stored")
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
