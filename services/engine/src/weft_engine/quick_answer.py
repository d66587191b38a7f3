"""Quick-answer's retrieval (SPEC A-01, C-04): the calls the engine makes itself, no model.

The knowledge base is searched with the (rewritten, ``rewrite.py``) question when the
agent has ``search_knowledge``, and the web with it when the agent has ``web_search``
(its web switch on and the request allowing it), for ``web_search_max_results`` results
(5 by default; at most what the tool takes). Both are read-only: they run in parallel.
"""

from __future__ import annotations

import json

from weft_contracts import AgentConfig
from weft_llm import ToolCallRequest
from weft_tools.specs import WEB_SEARCH_MAX_COUNT

RETRIEVAL_TOOLS = ("search_knowledge", "web_search")


def retrieval_tools(agent: AgentConfig) -> list[str]:
    """The agent's retrieval tools, in call order (none: quick-answer only generates)."""
    return [tool for tool in RETRIEVAL_TOOLS if tool in agent.allowed_tools]


def retrieval_calls(agent: AgentConfig, query: str) -> list[ToolCallRequest]:
    """The pipeline's calls for ``query``, in a fixed order (none without a retrieval tool)."""
    arguments = {
        "search_knowledge": {"query": query},
        "web_search": {
            "query": query,
            "count": min(agent.web_search_max_results, WEB_SEARCH_MAX_COUNT),
        },
    }
    return [
        ToolCallRequest(id=f"call_qa_{n}", name=name, arguments=json.dumps(arguments[name]))
        for n, name in enumerate(retrieval_tools(agent))
    ]
