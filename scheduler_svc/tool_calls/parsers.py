"""The tool call parsers of tool_choice "auto" by their ``--tool-call-parser`` names (vLLM's names): each a module
offering common.ToolCallParser's parse_output and stream_parser.

- ``hermes``: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` blocks (Hermes, Qwen 2.5/3);
- ``llama3_json``: JSON objects ``{"name": ..., "parameters": {...}}``, maybe after ``<|python_tag|>``, separated
  by ``;`` (Llama 3.1/3.2/3.3);
- ``pythonic``: a Python list of calls ``[f(a=1), g()]`` (Llama 3.2, Llama 4, ToolACE);
- ``mistral``: ``[TOOL_CALLS]`` and a JSON array of ``{"name": ..., "arguments": {...}}`` (Mistral 7B v0.3, Nemo);
- ``openai``: gpt-oss's harmony messages addressed ``to=functions.NAME`` (with ``--reasoning-parser openai_gptoss``).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from scheduler_svc.tool_calls import harmony, hermes, llama3_json, mistral, pythonic
from scheduler_svc.tool_calls.common import ToolCallParser

PARSERS: Mapping[str, ToolCallParser] = MappingProxyType({
    "hermes": hermes,
    "llama3_json": llama3_json,
    "pythonic": pythonic,
    "mistral": mistral,
    "openai": harmony,
})
"""Every parser by name, in config.TOOL_CALL_PARSERS' order."""


def tool_call_parser(name: str) -> ToolCallParser:
    """The parser of ``--tool-call-parser name`` (KeyError for a name not in PARSERS)."""
    return PARSERS[name]
