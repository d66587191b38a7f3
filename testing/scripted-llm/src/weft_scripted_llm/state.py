"""The mutable state of one test double server: policy, request log, stall release."""

from __future__ import annotations

import asyncio
import logging

from starlette.requests import Request

from weft_scripted_llm.policy import DemoPolicy, Policy, ScriptPolicy
from weft_scripted_llm.recorder import RequestLog
from weft_scripted_llm.script import Script, load_script
from weft_scripted_llm.settings import Settings

log = logging.getLogger("weft_scripted_llm")


def startup_policy(settings: Settings) -> Policy:
    """The policy chosen by the settings: the script file, an empty script, or the demo."""
    if settings.policy == "demo":
        return DemoPolicy(settings.words_per_chunk)
    script = load_script(settings.script_path) if settings.script_path else Script()
    return ScriptPolicy(script, settings.words_per_chunk)


class ServerState:
    """Everything the routes share."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.policy: Policy = startup_policy(settings)
        self.requests = RequestLog()
        self.release = asyncio.Event()

    def use_script(self, script: Script) -> None:
        """Switch to playing `script` from its first step."""
        self.policy = ScriptPolicy(script, self.settings.words_per_chunk)
        log.info("scripted LLM test double: script loaded (%d global steps)", len(script.steps))

    def reset(self) -> None:
        """Back to the startup policy (script rewound), empty log, stalled requests released."""
        self.policy = startup_policy(self.settings)
        self.requests.clear()
        self.release_stalls()
        log.info("scripted LLM test double: reset (policy=%s)", self.policy.name)

    def release_stalls(self) -> None:
        self.release.set()
        self.release = asyncio.Event()


def state_of(request: Request) -> ServerState:
    """The `ServerState` of the app serving `request`."""
    state: ServerState = request.app.state.scripted_llm
    return state
