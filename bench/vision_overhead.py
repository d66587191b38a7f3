"""What images cost in-process (SPEC E-26): the gateway's check of a chat request's images,
and the turn state's JSON round trip (done on every step's Redis save and load) with and
without images. A data-URI image is parked in Redis beside the state
(``weft_engine.parked_images``): the parked state's round trip, and what putting the image
back into a model request costs (one Redis round trip, on the real Redis of
``WEFT_REDIS_URL``). Writes ``bench/results/vision_overhead.json``.

    .venv/bin/python bench/vision_overhead.py --seconds 1
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import os
import time
from collections.abc import Awaitable, Callable
from typing import Any

from benchlib import machine, save
from redis.asyncio import Redis
from weft_contracts import AgentConfig
from weft_engine.parked_images import ParkedImages
from weft_engine.prompt import initial_messages
from weft_engine.state import TurnState
from weft_gateway.images import check_images
from weft_gateway.settings import GatewaySettings

URLS = [f"https://images.example.com/photo-{n}.jpg" for n in range(4)]


def _png_uri(size: int) -> str:
    return "data:image/png;base64," + base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\0" * size).decode()


def _rate(work: Callable[[], object], seconds: float) -> dict[str, float]:
    calls, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        work()
        calls += 1
    elapsed = time.perf_counter() - started
    return {
        "calls_per_s": round(calls / elapsed, 1),
        "us_per_call": round(elapsed / calls * 1e6, 1),
    }


def _state(images: list[str]) -> TurnState:
    agent = AgentConfig(agent_id="a", model="m", vision=True, image_upload_enabled=True)
    history = [{"role": "user" if i % 2 else "assistant", "content": "x" * 400} for i in range(20)]
    messages = initial_messages(agent, history, "What is on this picture?", "s", images=images)
    return TurnState(
        tenant_id="t", session_id="s", request_id="r", user_id="u", agent=agent,
        messages=messages, started_at=time.time(),
    )  # fmt: skip


def _round_trip(state: TurnState, seconds: float) -> dict[str, Any]:
    raw = state.model_dump_json()
    result: dict[str, Any] = {"state_bytes": len(raw)}
    result.update(_rate(lambda: TurnState.model_validate_json(state.model_dump_json()), seconds))
    return result


async def _us_per_call(work: Callable[[], Awaitable[object]], seconds: float) -> float:
    calls, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        await work()
        calls += 1
    return round((time.perf_counter() - started) / calls * 1e6, 1)


async def _in_redis(image: str, seconds: float) -> dict[str, Any]:
    """On the real Redis: a step's save and load (SET + GET of the state's JSON) with the
    data URI in the state and parked, and one resolve of the parked image (what each model
    request of such a turn pays instead)."""
    redis = Redis.from_url(os.environ.get("WEFT_REDIS_URL", "redis://127.0.0.1:16379/0"))
    images = ParkedImages(redis, ttl_s=60)
    key = "weft:bench:vision:state"
    state = _state([image])

    async def save_and_load(raw: str) -> None:
        await redis.set(key, raw, ex=60)
        await redis.get(key)

    try:
        messages, _ = await images.park("req_bench_vision", state.messages, [])
        parked = state.model_copy(update={"messages": messages})
        return {
            "save_load_us_data_uri_in_state": await _us_per_call(
                lambda: save_and_load(state.model_dump_json()), seconds
            ),
            "save_load_us_parked": await _us_per_call(
                lambda: save_and_load(parked.model_dump_json()), seconds
            ),
            "resolve_us": await _us_per_call(lambda: images.resolve(messages), seconds),
            "parked_state": _round_trip(parked, seconds),
        }
    finally:
        await redis.delete(key, "weft:turn:req_bench_vision:images")
        await redis.aclose()


def run(seconds: float) -> dict[str, Any]:
    settings = GatewaySettings()
    biggest = _png_uri(settings.chat_image_max_bytes - 8)
    result: dict[str, Any] = {
        "bench": "vision_overhead",
        "check_4_urls": _rate(lambda: check_images(URLS, settings), seconds),
        "check_data_uri_max": {"chars": len(biggest)}
        | _rate(lambda: check_images([biggest], settings), seconds),
        "state_no_images": _round_trip(_state([]), seconds),
        "state_4_urls": _round_trip(_state(URLS), seconds),
        "state_data_uri_max": _round_trip(_state([biggest]), seconds),
        "data_uri_max_in_redis": asyncio.run(_in_redis(biggest, seconds)),
    }
    result.update(machine())
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=1.0)
    result = run(parser.parse_args().seconds)
    save("vision_overhead", result)


if __name__ == "__main__":
    main()
