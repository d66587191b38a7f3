"""Vision routing through the real stack (SPEC E-26): gateway -> agent-config (model
capability table) -> Kafka -> engine -> scripted LLM over HTTP; memory stores the images
with the user message and replays them in the next turn's history.

The scripted LLM's request log shows what each model received.
"""

from __future__ import annotations

import asyncio
import base64
import struct
import zlib
from typing import Any

import httpx
from redis.asyncio import Redis
from weft_testkit import LocalStack, SseEvent, chat_requests, read_turn

from tests.e2e.test_agent_sharing import _organisation, internal, recipient  # noqa: F401

PURE = {"allowed_tools": [], "kb_selection_mode": "none"}
IMAGE_URL = "https://images.example.com/receipt.png"
VLM = "weft-scripted-vlm"
DESCRIPTION = "A shop receipt totalling 42.50 EUR."


def _png_data_uri() -> str:
    """A real 1x1 PNG as a data URI."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        crc = zlib.crc32(kind + body)
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", crc)

    header = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)
    pixels = zlib.compress(b"\x00\xff\x00\x00")
    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels)
    png += chunk(b"IEND", b"")
    return "data:image/png;base64," + base64.b64encode(png).decode()


async def _agent(api: httpx.AsyncClient, **fields: Any) -> str:
    body = {"name": "vision agent", "image_upload_enabled": True, **PURE, **fields}
    resp = await api.post("/api/v1/agents", json=body)
    assert resp.status_code == 201, resp.text
    agent_id: str = resp.json()["id"]
    return agent_id


async def _session(api: httpx.AsyncClient, agent_id: str) -> str:
    resp = await api.post("/api/v1/sessions", json={"agent_id": agent_id})
    assert resp.status_code == 201, resp.text
    session_id: str = resp.json()["id"]
    return session_id


async def _turn(
    api: httpx.AsyncClient, stack: LocalStack, session_id: str, query: str, images: list[str]
) -> list[SseEvent]:
    events = await read_turn(
        api, f"/api/v1/agent-chat/{session_id}", api_key=stack.api_key,
        json_body={"query": query, "images": images},
    )  # fmt: skip
    assert events[-1].event == "complete", events[-1]
    assert events[-1].data["data"]["status"] == "completed", events[-1].data
    return events


async def _stored_user_message(api: httpx.AsyncClient, session_id: str) -> dict[str, Any]:
    """The session's first user message once memory stored its completed turn (memory
    consumes the events in parallel with the SSE client)."""
    async with asyncio.timeout(30):
        while True:
            resp = await api.get(f"/api/v1/sessions/{session_id}/messages")
            messages = resp.json()
            if any(m["role"] == "assistant" and m["is_completed"] for m in messages):
                return next(m for m in messages if m["role"] == "user")
            await asyncio.sleep(0.2)


def _user_messages(request: dict[str, Any]) -> list[Any]:
    return [m["content"] for m in request["messages"] if m["role"] == "user"]


def _image_urls(content: Any) -> list[str]:
    if not isinstance(content, list):
        return []
    return [p["image_url"]["url"] for p in content if p.get("type") == "image_url"]


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "\n".join(p.get("text", "") for p in content if p.get("type") == "text")
    return str(content)


async def test_vision_model_receives_image_parts(
    api: httpx.AsyncClient, stack: LocalStack, llm: httpx.AsyncClient
) -> None:
    """SPEC E-26: a chat model with vision gets the user message as a text part and one
    image_url part per image, and no VLM is called; the next turn's history replays the
    stored images as parts again."""
    agent = await _agent(api, model="weft-scripted-vision", vlm_model_id=VLM)
    session = await _session(api, agent)
    data_uri = _png_data_uri()
    await _turn(api, stack, session, "What is on these pictures?", [IMAGE_URL, data_uri])
    requests = await chat_requests(llm)
    assert [r["model"] for r in requests] == ["weft-scripted-vision"]
    current = _user_messages(requests[0])[-1]
    assert _image_urls(current) == [IMAGE_URL, data_uri]
    assert "What is on these pictures?" in _text(current)

    stored = await _stored_user_message(api, session)
    assert stored["images"] == [
        {"url": IMAGE_URL, "description": None},
        {"url": data_uri, "description": None},
    ]
    await _turn(api, stack, session, "And now?", [])
    again = (await chat_requests(llm))[-1]
    first, latest = _user_messages(again)[-2:]
    assert _image_urls(first) == [IMAGE_URL, data_uri]  # history keeps the images
    assert latest == _text(latest) and "And now?" in latest


async def _parked_turn(redis: Redis, session_id: str) -> tuple[str, str]:
    """The state and images keys of the session's running turn, once it has parked images."""
    async with asyncio.timeout(15):
        while True:
            async for key in redis.scan_iter(match="weft:turn:*:images"):
                state_key = key.decode().removesuffix(":images") + ":state"
                state = await redis.get(state_key)
                if state and session_id.encode() in state:
                    return state_key, key.decode()
            await asyncio.sleep(0.1)


async def test_data_uri_images_stay_out_of_the_turn_state(
    api: httpx.AsyncClient, stack: LocalStack, llm: httpx.AsyncClient, redis: Redis
) -> None:
    """SPEC E-26: a data-URI image is parked beside the turn's state, which every
    step loads and saves, and put back into each model request; both go with the turn."""
    script = {"steps": [{"delay_ms": 3000, "content": "A green pixel."}]}
    assert (await llm.post("/_script", json=script)).status_code == 200
    session = await _session(api, await _agent(api, model="weft-scripted-vision"))
    data_uri = _png_data_uri()
    turn = asyncio.create_task(_turn(api, stack, session, "What is this?", [data_uri]))
    state_key, images_key = await _parked_turn(redis, session)  # the model call is waiting
    stored = await redis.get(state_key)
    assert isinstance(stored, bytes)  # saved, and read by a client without decode_responses
    state = stored.decode()
    assert data_uri not in state and "weft-image://" in state
    assert await redis.hvals(images_key) == [data_uri.encode()]

    await turn
    (request,) = await chat_requests(llm)
    assert _image_urls(_user_messages(request)[-1]) == [data_uri]
    async with asyncio.timeout(10):  # dropped just after `complete` is published
        while True:
            if not await redis.exists(state_key, images_key):
                break
            await asyncio.sleep(0.1)


async def test_model_without_vision_reads_vlm_descriptions(
    api: httpx.AsyncClient, stack: LocalStack, llm: httpx.AsyncClient
) -> None:
    """SPEC E-26: without vision, the agent's VLM gets the image and its description is
    appended to the query in <image_descriptions>; images_described reports it; reloaded
    history uses the stored description and does not call the VLM again."""
    steps = [
        {"match": "Describe this image", "content": DESCRIPTION},
        {"content": "The total is 42.50 EUR."},
        {"content": "Still 42.50 EUR."},
    ]
    assert (await llm.post("/_script", json={"steps": steps})).status_code == 200
    agent = await _agent(api, model="weft-scripted", vlm_model_id=VLM)
    session = await _session(api, agent)
    events = await _turn(api, stack, session, "How much did I pay?", [IMAGE_URL])
    described = [e.data["data"] for e in events if e.event == "images_described"]
    assert described == [{"model": VLM, "descriptions": [DESCRIPTION], "note": ""}]

    vlm_call, chat = await chat_requests(llm)
    assert vlm_call["model"] == VLM
    assert _image_urls(vlm_call["messages"][-1]["content"]) == [IMAGE_URL]
    assert chat["model"] == "weft-scripted"
    query = _user_messages(chat)[-1]
    assert isinstance(query, str) and "How much did I pay?" in query
    assert f"<image_descriptions>\nImage 1: {DESCRIPTION}\n</image_descriptions>" in query

    stored = await _stored_user_message(api, session)
    assert stored["images"] == [{"url": IMAGE_URL, "description": DESCRIPTION}]
    await _turn(api, stack, session, "Are you sure?", [])
    requests = await chat_requests(llm)
    assert [r["model"] for r in requests] == [VLM, "weft-scripted", "weft-scripted"]
    history_query = _user_messages(requests[-1])[-2]
    assert isinstance(history_query, str) and DESCRIPTION in history_query


async def test_unreadable_images_leave_a_note(
    api: httpx.AsyncClient, stack: LocalStack, llm: httpx.AsyncClient
) -> None:
    """SPEC E-26: no VLM configured -> the turn completes and the query says the image
    could not be read; a failing VLM call does the same instead of crashing the turn."""
    agent = await _agent(api, model="weft-scripted")
    events = await _turn(api, stack, await _session(api, agent), "What is this?", [IMAGE_URL])
    described = [e.data["data"] for e in events if e.event == "images_described"]
    assert described[0]["model"] is None and "could not be read" in described[0]["note"]
    (chat,) = await chat_requests(llm)
    assert "no image-description model" in _user_messages(chat)[-1]

    await llm.post("/_reset")
    steps = [
        {"match": "Describe this image", "error": {"status": 400, "message": "bad image"}},
        {"content": "I could not see the image."},
    ]
    assert (await llm.post("/_script", json={"steps": steps})).status_code == 200
    agent = await _agent(api, model="weft-scripted", vlm_model_id=VLM)
    events = await _turn(api, stack, await _session(api, agent), "What is this?", [IMAGE_URL])
    answer = "".join(e.data["data"]["delta"] for e in events if e.event == "final_answer")
    assert answer == "I could not see the image."
    query = _user_messages((await chat_requests(llm))[-1])[-1]
    assert "(this image could not be read)" in query and "model failed" in query


async def test_bad_images_are_refused_with_a_reason(
    api: httpx.AsyncClient, stack: LocalStack
) -> None:
    """SPEC E-26: bad image references and images for an agent with image upload off are
    400s that say why; nothing is published."""
    agent = await _agent(api, model="weft-scripted-vision")
    session = await _session(api, agent)
    url = f"/api/v1/agent-chat/{session}"
    text_as_png = "data:image/png;base64," + base64.b64encode(b"hello, not a png").decode()
    too_big = "data:image/png;base64," + "A" * 600_000
    cases = {
        "http://images.example.com/a.png": "unsupported reference",
        "ftp://images.example.com/a.png": "unsupported reference",
        "data:text/plain;base64,aGVsbG8=": "not an accepted image type",
        "data:image/png,rawbytes": "data:image/<type>;base64",
        "data:image/png;base64,@@@@": "not valid base64",
        text_as_png: "not a image/png image",
        too_big: "larger than",
        "https://": "not a valid https URL",
    }
    for image, reason in cases.items():
        resp = await api.post(url, json={"query": "look", "images": [image]})
        assert resp.status_code == 400, (image[:40], resp.text)
        assert reason in resp.json()["detail"], (image[:40], resp.text)
    resp = await api.post(url, json={"query": "look", "images": [IMAGE_URL] * 5})
    assert resp.status_code == 400 and "too many images" in resp.json()["detail"]

    closed = await _agent(api, model="weft-scripted-vision", image_upload_enabled=False)
    resp = await api.post(
        f"/api/v1/agent-chat/{session}",
        json={"query": "look", "agent_id": closed, "images": [IMAGE_URL]},
    )
    assert resp.status_code == 400 and "image_upload_enabled" in resp.json()["detail"]
    resp = await api.post(
        f"/api/v1/knowledge-chat/{session}",
        json={"query": "look", "agent_id": closed, "images": [IMAGE_URL]},
    )
    assert resp.status_code == 400


async def test_shared_agent_reads_images_with_the_owner_models(
    api: httpx.AsyncClient,
    stack: LocalStack,
    llm: httpx.AsyncClient,
    internal: httpx.AsyncClient,  # noqa: F811
    recipient: tuple[str, httpx.AsyncClient],  # noqa: F811
) -> None:
    """SPEC E-26 / A-10: a recipient's images go to the owner's chat model and VLM; the
    recipient's summary_model_id (a vision model) does not change the route."""
    steps = [
        {"match": "Describe this image", "content": DESCRIPTION},
        {"content": "The owner's model answers."},
    ]
    assert (await llm.post("/_script", json={"steps": steps})).status_code == 200
    other_tenant, other = recipient
    org = await _organisation(internal, {stack.tenant: "editor", other_tenant: "viewer"})
    agent = await _agent(api, model="weft-scripted", rerank_model_id="rr", vlm_model_id="owner-vlm")
    shared = await api.post(f"/api/v1/agents/{agent}/shares", json={"organisation_id": org})
    assert shared.status_code == 201, shared.text
    session = (await other.post("/api/v1/sessions", json={"agent_id": agent})).json()["id"]
    events = await read_turn(
        other, f"/api/v1/agent-chat/{session}", api_key=other.headers["X-Test-Key"],
        json_body={"query": "How much?", "images": [IMAGE_URL],
                   "summary_model_id": "weft-scripted-vision"},
    )  # fmt: skip
    assert events[-1].data["data"]["status"] == "completed", events[-1].data
    vlm_call, chat = await chat_requests(llm)
    assert (vlm_call["model"], chat["model"]) == ("owner-vlm", "weft-scripted")
    assert DESCRIPTION in _user_messages(chat)[-1]
