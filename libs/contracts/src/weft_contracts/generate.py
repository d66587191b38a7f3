"""Write the JSON Schemas and the AsyncAPI document of Weft's topics (``make proto``).

Usage: ``python -m weft_contracts.generate [OUT_DIR]`` (default ``proto``). The output is
deterministic so that a test can compare it with what is committed.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter

from weft_contracts.envelope import SCHEMA_VERSION
from weft_contracts.topics import TOPIC_MODELS, Topic

_DESCRIPTIONS: dict[Topic, str] = {
    Topic.AGENT_REQUESTS: "Turns to run (gateway -> engine). Key: session id.",
    Topic.AGENT_CONTROL: "Cancel and steer commands, and approval decisions: a person's "
    "(gateway) or an expiry (memory) -> engine. Key: session id.",
    Topic.AGENT_EVENTS: "The public agent event stream, approval prompts and their "
    "resolutions included (engine only). Key: session id; seq per turn.",
    Topic.TOOL_CALLS: "Tool calls (engine -> tool-exec). Key: call id.",
    Topic.SANDBOX_CALLS: "Sandbox tool calls (engine -> sandbox). Key: session id.",
    Topic.TOOL_RESULTS: "Tool results (tool-exec, sandbox -> engine). Key: session id.",
    Topic.SESSION_NOTICES: "Session events that are not a turn's (suggestions ready, "
    "approval escalations, knowledge progress). Key: session id.",
    Topic.DLQ: "Records a consumer could not decode or process, with the reason.",
}


def schema_file_name(topic: Topic) -> str:
    """``weft.agent.events.v1`` -> ``agent.events.v1.schema.json``."""
    return topic.value.removeprefix("weft.") + ".schema.json"


def topic_schemas() -> dict[Topic, dict[str, Any]]:
    """The JSON Schema of each topic's message union, as readers take it: without the
    models' ``additionalProperties: false`` (``weft_contracts.compat``: a reader ignores
    the fields a later version added)."""
    return {
        topic: _open_to_additions(TypeAdapter(model).json_schema(mode="serialization"))
        for topic, model in TOPIC_MODELS.items()
    }


def _open_to_additions(schema: Any) -> Any:
    if isinstance(schema, dict):
        return {
            key: _open_to_additions(value)
            for key, value in schema.items()
            if not (key == "additionalProperties" and value is False)
        }
    if isinstance(schema, list):
        return [_open_to_additions(item) for item in schema]
    return schema


def asyncapi_document(schemas: dict[Topic, dict[str, Any]]) -> dict[str, Any]:
    """An AsyncAPI 3.0 document naming every channel and its message schema file."""
    channels: dict[str, Any] = {}
    operations: dict[str, Any] = {}
    for topic in Topic:
        name = topic.value.removeprefix("weft.").replace(".", "_")
        channels[name] = {
            "address": topic.value,
            "description": _DESCRIPTIONS[topic],
            "messages": {
                "message": {
                    "contentType": "application/json",
                    "payload": {"$ref": f"./schemas/{schema_file_name(topic)}"},
                }
            },
        }
        operations[f"publish_{name}"] = {
            "action": "send",
            "channel": {"$ref": f"#/channels/{name}"},
        }
    return {
        "asyncapi": "3.0.0",
        "info": {
            "title": "Weft agent runtime",
            "version": f"{SCHEMA_VERSION}.0.0",
            "description": "Kafka topics of Weft. Generated from weft_contracts; do not edit. "
            "Within one schema_version the shapes only grow (a field is added with a default); "
            "readers ignore fields they do not know and refuse a newer schema_version "
            "(weft_contracts.compat).",
        },
        "defaultContentType": "application/json",
        "servers": {"local": {"host": "127.0.0.1:19092", "protocol": "kafka"}},
        "channels": channels,
        "operations": operations,
    }


def render(out_dir: Path) -> dict[Path, str]:
    """Every generated file and its exact content."""
    schemas = topic_schemas()
    files = {out_dir / "schemas" / schema_file_name(t): _dump(s) for t, s in schemas.items()}
    files[out_dir / "asyncapi.json"] = _dump(asyncapi_document(schemas))
    return files


def _dump(value: dict[str, Any]) -> str:
    return json.dumps(value, indent=2, sort_keys=True) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Write the files and print their paths."""
    args = sys.argv[1:] if argv is None else argv
    out_dir = Path(args[0] if args else "proto")
    for path, content in render(out_dir).items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
