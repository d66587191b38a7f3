"""Weft scripted LLM: an OpenAI-compatible TEST DOUBLE, not a real model.

It answers Chat Completions and Embeddings requests either from a script (a list of
canned steps, with fault injection) or from the offline demo policy, so the Weft
services can be tested and demonstrated without a real model provider.
"""

from weft_scripted_llm.app import create_app
from weft_scripted_llm.settings import PolicyName, Settings

__all__ = ["PolicyName", "Settings", "create_app"]
