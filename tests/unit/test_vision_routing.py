"""Vision routing without infrastructure (SPEC E-26): the routing decision, the user
message the engine builds, the VLM describer (with an in-process model double), the
gateway's image checks, the model capability table and the history replay."""

from __future__ import annotations

import base64
import time
from typing import Any

import pytest
from fastapi import HTTPException
from weft_agent_config.definition import AgentDefinition
from weft_agent_config.model_capabilities import ModelCapabilities
from weft_agent_config.resolver import runtime_config
from weft_context.tokens import IMAGE_TOKENS, TokenEstimator
from weft_contracts import AgentConfig, ImagesDescribedEvent
from weft_engine.prompt import initial_messages
from weft_engine.state import TurnState
from weft_engine.vision import ImageDescriber, content_text, route_images
from weft_gateway.images import check_images, require_image_upload
from weft_gateway.settings import GatewaySettings
from weft_llm import LLMCallError, TransientLLMError
from weft_memory.replay import replay_turn
from weft_testkit.function_model import FunctionModel, ModelCall, Reply, answer

from tests.unit.turn_states import parts, text

URL = "https://img.example.com/a.png"
PNG = "data:image/png;base64," + base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\0" * 16).decode()
MODELS = ModelCapabilities.load()


def _agent(**fields: Any) -> AgentConfig:
    return AgentConfig(agent_id="a", model="m", **fields)


@pytest.mark.parametrize(
    ("fields", "images", "route"),
    [
        ({"vision": True}, [], "none"),
        ({"vision": True, "vlm_model": "v"}, [URL], "direct"),
        ({"vlm_model": "v"}, [URL], "describe"),
        ({}, [URL], "unreadable"),
    ],
)
def test_route_follows_the_model_capability(
    fields: dict[str, Any], images: list[str], route: str
) -> None:
    """SPEC E-26: images direct to a vision model, else the VLM, else unreadable."""
    assert route_images(_agent(**fields), images) == route


def test_vision_model_gets_image_parts_in_the_user_message() -> None:
    """SPEC E-26: text part (query + runtime context) then one image_url part per image."""
    messages = initial_messages(_agent(vision=True), [], "what is this?", "s1", images=[URL, PNG])
    content = parts(messages[-1])
    first, *images = content
    assert first["type"] == "text" and first["text"].startswith("what is this?")
    assert [p["image_url"]["url"] for p in images if p["type"] == "image_url"] == [URL, PNG]
    assert len(images) == 2
    assert content_text(content).startswith("what is this?")
    plain = initial_messages(_agent(vlm_model="v"), [], "what is this?", "s1", images=[URL])
    assert isinstance(plain[-1]["content"], str)  # described later, in the first step


def _vlm(transient_failures: int = 0) -> FunctionModel:
    """A VLM double: answers by URL, fails for URLs containing 'broken'; the first
    ``transient_failures`` other requests get a 503."""
    left = [transient_failures]

    def reply(call: ModelCall) -> Reply:
        url = call.last_message["content"][1]["image_url"]["url"]
        if "broken" in url:
            return LLMCallError("bad image", status=400)
        if left[0]:
            left[0] -= 1
            return TransientLLMError("overloaded", status=503)
        return answer(f"  picture of {url[-5:]} ")

    return FunctionModel(reply=reply)


class _Emitter:
    def __init__(self) -> None:
        self.events: list[tuple[Any, Any]] = []

    async def emit(self, event_type: Any, ids: dict[str, Any], data: Any, **_: Any) -> None:
        self.events.append((event_type, data))


def _state(agent: AgentConfig, images: list[str]) -> TurnState:
    return TurnState(
        tenant_id="t", session_id="s", request_id="r", user_id="u", agent=agent,
        messages=[{"role": "system", "content": "sys"}, {"role": "user", "content": "q"}],
        images_to_describe=images, started_at=time.time(),
    )  # fmt: skip


async def test_describer_appends_descriptions_and_notes_failures() -> None:
    """SPEC E-26: the VLM named by the agent reads each image; its text goes into the
    query in <image_descriptions>; a failed image is marked unreadable with a note."""
    model, emitter = _vlm(), _Emitter()
    describer = ImageDescriber(model, emitter)  # type: ignore[arg-type]
    broken = "https://img.example.com/broken.png"
    state = await describer.read_pending(_state(_agent(vlm_model="vlm-1"), [URL, broken]))
    assert [r.model for r in model.requests] == ["vlm-1", "vlm-1"]
    query = text(state.messages[-1])
    assert query.startswith("q\n\n<image_descriptions>\nImage 1: picture of a.png\n")
    assert "Image 2: (this image could not be read)" in query
    assert "1 of the attached image(s) could not be read" in query
    assert state.images_to_describe == []
    (event_type, data), *_ = emitter.events
    assert event_type is ImagesDescribedEvent and data.descriptions == ["picture of a.png", ""]


async def test_transient_vlm_failures_are_retried_then_given_up() -> None:
    """SPEC E-26 / E-07: a 503 from the VLM is retried once; two in a row leave the image
    unread (a bad-request failure is not retried at all, see above)."""
    model = _vlm(transient_failures=1)
    describer = ImageDescriber(model, _Emitter(), retry_backoff_s=(0.0,))  # type: ignore[arg-type]
    assert await describer.describe(_agent(vlm_model="v"), [URL]) == ["picture of a.png"]
    assert len(model.requests) == 2
    model = _vlm(transient_failures=2)
    describer = ImageDescriber(model, _Emitter(), retry_backoff_s=(0.0,))  # type: ignore[arg-type]
    assert await describer.describe(_agent(vlm_model="v"), [URL]) == [""]
    assert len(model.requests) == 2


async def test_without_vlm_the_query_says_the_images_are_unread() -> None:
    """SPEC E-26: no VLM -> no model call, a visible note, the turn goes on."""
    model, emitter = _vlm(), _Emitter()
    state = await ImageDescriber(model, emitter).read_pending(  # type: ignore[arg-type]
        _state(_agent(), [URL])
    )
    assert model.requests == []
    assert "no image-description model" in text(state.messages[-1])
    assert emitter.events[0][1].model is None


def _settings(**fields: Any) -> GatewaySettings:
    return GatewaySettings(**fields)


@pytest.mark.parametrize(
    ("image", "reason"),
    [
        ("http://x.example.com/a.png", "unsupported reference"),
        ("/etc/passwd", "unsupported reference"),
        ("https://", "not a valid https URL"),
        ("https://x.example.com/a b.png", "not a valid https URL"),
        ("data:image/svg+xml;base64,PHN2Zz4=", "not an accepted image type"),
        ("data:image/png;base64,!!!", "not valid base64"),
        ("data:image/png;base64,", "empty"),
        ("data:image/jpeg;base64," + base64.b64encode(b"GIF89a....").decode(), "not a image/jpeg"),
    ],
)
def test_bad_images_are_400_with_a_reason(image: str, reason: str) -> None:
    """SPEC E-26: bad scheme, not an image, broken data -> 400 naming the fault."""
    with pytest.raises(HTTPException) as caught:
        check_images([image], _settings())
    assert caught.value.status_code == 400 and reason in str(caught.value.detail)


def test_image_limits_are_settings() -> None:
    """SPEC E-26: count, per-image size and total size limits come from settings."""
    assert check_images([URL, PNG], _settings()) == [URL, PNG]
    with pytest.raises(HTTPException, match="too many images"):
        check_images([URL] * 2, _settings(chat_image_max_count=1))
    big = "data:image/png;base64," + base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\0" * 4096).decode()
    with pytest.raises(HTTPException, match="larger than 1024 bytes"):
        check_images([big], _settings(chat_image_max_bytes=1024))
    with pytest.raises(HTTPException, match="images too large"):
        check_images([big, big], _settings(chat_images_max_total_chars=8000))


def test_images_need_image_upload_on_the_agent() -> None:
    """SPEC E-26: an agent with image upload off refuses images (400), not text."""
    require_image_upload(_agent(), [])
    require_image_upload(_agent(image_upload_enabled=True), [URL])
    with pytest.raises(HTTPException, match="image_upload_enabled"):
        require_image_upload(_agent(), [URL])


def test_capability_table_and_runtime_config_carry_vision() -> None:
    """SPEC E-26 / A-08: the table says which models read images; the resolved config
    carries it with the agent's image upload switch and VLM."""
    assert MODELS.supports_vision("weft-scripted-vision")
    assert not MODELS.supports_vision("weft-scripted")
    assert MODELS.supports_vision("gpt-4o-mini") and not MODELS.supports_vision("gpt-4-turbo")
    assert not MODELS.supports_vision("o3-mini") and MODELS.supports_vision("o3")
    assert not MODELS.supports_vision("unknown-model")
    agent = AgentDefinition(name="a", image_upload_enabled=True, vlm_model_id="vlm-1")
    config = runtime_config(
        "a", agent, default_model="weft-scripted-vision", knowledge_base_ids=[], models=MODELS
    )
    assert (config.vision, config.image_upload_enabled, config.vlm_model) == (True, True, "vlm-1")
    plain = runtime_config(
        "a", AgentDefinition(name="a"), default_model="gpt-4", knowledge_base_ids=[], models=MODELS
    )
    assert (plain.vision, plain.image_upload_enabled, plain.vlm_model) == (False, False, None)


class _Row:
    def __init__(self, content: str, images: list[dict[str, Any]] | None = None) -> None:
        self.content = content
        self.agent_steps: list[dict[str, Any]] = []
        self.images = images or []


def test_history_replays_images_by_model_capability() -> None:
    """SPEC E-26: stored images come back as parts for a vision model, as the stored
    descriptions (never a new VLM call) for a model without vision."""
    user = _Row("what is it?", [{"url": URL, "description": "a cat"}, {"url": PNG}])
    vision = replay_turn(user, _Row("a cat"), vision=True)[0]["content"]
    assert [p.get("image_url", {}).get("url") for p in vision] == [None, URL, PNG]
    text = replay_turn(user, _Row("a cat"))[0]["content"]
    assert text == (
        "what is it?\n\n<image_descriptions>\nImage 1: a cat\n"
        "Image 2: (this image could not be read)\n</image_descriptions>"
    )
    assert replay_turn(_Row("hi"), _Row("hello"), vision=True)[0]["content"] == "hi"


def test_image_parts_count_in_the_token_estimate() -> None:
    """SPEC E-26 / M-01: an image part costs IMAGE_TOKENS, whatever its URL's length, so
    history with images does not overflow the window unseen."""
    estimator = TokenEstimator()
    text = {"role": "user", "content": "what is it?"}
    with_images = initial_messages(_agent(vision=True), [], "what is it?", images=[URL, PNG])[-1]
    plain = initial_messages(_agent(vision=True), [], "what is it?")[-1]
    extra = estimator.message_tokens(with_images) - estimator.message_tokens(plain)
    assert extra == 2 * IMAGE_TOKENS
    assert estimator.message_tokens(text) < IMAGE_TOKENS
