"""A turn's data-URI images parked beside its state, on the real Redis (SPEC E-26).

The whole path (intake parks, the model request gets the data, the keys go with the
turn) is tests/e2e/test_vision.py::test_data_uri_images_stay_out_of_the_turn_state.
"""

from __future__ import annotations

import secrets

import pytest
from redis.asyncio import Redis
from weft_context.images import multimodal_content
from weft_engine.keys import images_key
from weft_engine.parked_images import REF_SCHEME, ImageResolvingModel, ParkedImages
from weft_engine.vision import discard
from weft_llm import (
    AssistantMessage,
    ChatMessage,
    LLMCallError,
    LLMRequest,
    TransientLLMError,
    UserMessage,
)
from weft_testkit.function_model import answer, replies

PNG = "data:image/png;base64," + "iVBORw0KGgo" * 40
JPEG = "data:image/jpeg;base64," + "/9j/4AAQSkZJRg" * 40
URL = "https://images.example.com/receipt.png"


def _urls(message: ChatMessage) -> list[str]:
    assert message["role"] == "user" and isinstance(message["content"], list)
    return [p["image_url"]["url"] for p in message["content"] if p["type"] == "image_url"]


async def test_data_uris_leave_the_messages_and_come_back(redis: Redis) -> None:
    rid = f"req_{secrets.token_hex(6)}"
    images = ParkedImages(redis, ttl_s=60)
    history: UserMessage = {"role": "user", "content": multimodal_content("before", [PNG])}
    current: UserMessage = {"role": "user", "content": multimodal_content("now", [URL, PNG, JPEG])}
    text: AssistantMessage = {"role": "assistant", "content": "plain"}
    messages, unread = await images.park(rid, [history, text, current], [JPEG, URL])

    refs = _urls(messages[2])
    assert refs[0] == URL and all(r.startswith(f"{REF_SCHEME}{rid}/") for r in refs[1:])
    assert _urls(messages[0]) == [refs[1]], "the same image is parked once"
    assert unread == [refs[2], URL] and messages[1] is text
    assert PNG not in str(messages) and JPEG not in str(messages)
    assert sorted(await redis.hvals(images_key(rid))) == sorted([PNG.encode(), JPEG.encode()])
    assert 0 < await redis.ttl(images_key(rid)) <= 60

    resolved = await images.resolve(messages)
    assert resolved == [history, text, current]
    plain = [text]
    assert await images.resolve(plain) is plain, "no reference: no round trip, same list"

    model = replies(answer("ok"))
    request = LLMRequest(model="m", messages=messages)
    await ImageResolvingModel(model, images).stream(request, discard)
    assert model.requests[0].messages == [history, text, current]


async def test_nothing_is_stored_without_a_data_uri(redis: Redis) -> None:
    rid = f"req_{secrets.token_hex(6)}"
    message: UserMessage = {"role": "user", "content": multimodal_content("look", [URL])}
    messages, unread = await ParkedImages(redis, ttl_s=60).park(rid, [message], [URL])
    assert messages == [message] and unread == [URL]
    assert not await redis.exists(images_key(rid))


async def test_an_expired_image_is_a_clear_model_error(redis: Redis) -> None:
    rid = f"req_{secrets.token_hex(6)}"
    images = ParkedImages(redis, ttl_s=60)
    message: UserMessage = {"role": "user", "content": multimodal_content("look", [PNG])}
    messages, _ = await images.park(rid, [message], [])
    await redis.delete(images_key(rid))
    with pytest.raises(LLMCallError, match="no longer stored") as raised:
        await images.resolve(messages)
    assert not isinstance(raised.value, TransientLLMError)
