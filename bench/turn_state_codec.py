"""What typing a turn's messages costs the engine per state load and save.

The engine loads its turn state from Redis at every step and saves it after. The state's
``messages`` are a union of TypedDicts discriminated by role (``weft_llm.ChatMessage``),
validated on load and dumped as the plain dicts they are on save. This compares that with
the same state whose messages are untyped ``list[dict]`` (what the engine stored before),
on a history of N earlier turns, each one search round with a 2 KB tool result.

Times are the process's CPU time per operation (``time.process_time``), which machine load
disturbs far less than wall-clock time; the best of several repeats is reported.

    .venv/bin/python bench/turn_state_codec.py --turns 5 20 80
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from benchlib import machine, save
from weft_contracts import AgentConfig
from weft_engine.prompt import initial_messages
from weft_engine.state import TurnState
from weft_llm import ChatMessage

PASSAGE = "Passage text of a retrieved chunk, as a search tool returns it. " * 32  # ~2 KB


class UntypedState(TurnState):
    """The same state with messages as plain dicts: no validation by role on load."""

    messages: list[dict[str, Any]]  # type: ignore[assignment]


def history(turns: int) -> list[ChatMessage]:
    messages: list[ChatMessage] = []
    for i in range(turns):
        messages += [
            {"role": "user", "content": f"question {i}"},
            {"role": "assistant", "content": "", "tool_calls": [{"id": f"k{i}", "type": "function",
             "function": {"name": "search_knowledge", "arguments": '{"query": "q"}'}}]},
            {"role": "tool", "tool_call_id": f"k{i}", "content": PASSAGE},
            {"role": "assistant", "content": f"answer {i} " * 40},
        ]  # fmt: skip
    return messages


def cpu_us_per_op(action: Any, ops: int, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.process_time()
        for _ in range(ops):
            action()
        best = min(best, (time.process_time() - start) / ops)
    return round(best * 1e6, 1)


def measure(turns: int, ops: int, repeats: int) -> dict[str, Any]:
    agent = AgentConfig(
        agent_id="bench", name="bench", model="m", system_prompt="You answer. " * 200
    )
    state = TurnState(
        tenant_id="t", session_id="s", request_id="r", user_id="u", agent=agent,
        messages=initial_messages(agent, history(turns), "the question"), started_at=time.time(),
    )  # fmt: skip
    raw = state.model_dump_json()
    untyped = UntypedState.model_validate_json(raw)
    assert untyped.model_dump_json() == raw
    row = {
        "history_turns": turns,
        "messages": len(state.messages),
        "state_kb": round(len(raw) / 1024, 1),
        "load_typed_us": cpu_us_per_op(lambda: TurnState.model_validate_json(raw), ops, repeats),
        "load_untyped_us": cpu_us_per_op(
            lambda: UntypedState.model_validate_json(raw), ops, repeats
        ),
        "save_typed_us": cpu_us_per_op(state.model_dump_json, ops, repeats),
        "save_untyped_us": cpu_us_per_op(untyped.model_dump_json, ops, repeats),
    }
    row["load_extra_us"] = round(row["load_typed_us"] - row["load_untyped_us"], 1)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, nargs="*", default=[5, 20, 80])
    parser.add_argument("--ops", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    rows = [measure(turns, args.ops, args.repeats) for turns in args.turns]
    for row in rows:
        print(
            f"{row['history_turns']:>3} turns ({row['messages']} messages, {row['state_kb']} KB): "
            f"load {row['load_typed_us']} us typed / {row['load_untyped_us']} us untyped, "
            f"save {row['save_typed_us']} / {row['save_untyped_us']} us"
        )
    save("turn_state_codec", {"machine": machine(), "rows": rows})


if __name__ == "__main__":
    main()
