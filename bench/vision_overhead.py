"""What images cost in-process (SPEC E-26): the gateway's check of a chat request's images,
and the turn state's JSON round trip (done on every step's Redis save and load) with and
without images. Writes ``bench/results/vision_overhead.json``.

    .venv/bin/python bench/vision_overhead.py --seconds 1
"""

from __future__ import annotations

import argparse
import base64
import time
from collections.abc import Callable
from typing import Any

from benchlib import machine, save
from weft_contracts import AgentConfig
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
