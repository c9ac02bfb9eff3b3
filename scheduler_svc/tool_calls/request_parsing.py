"""Which gRPC requests' outputs are parsed for tool calls (GenerateRequest.parse_tool_calls), and with what."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from scheduler_svc.request_errors import InvalidRequestError
from stepahead_proto import generation_pb2

HARMONY_PARSER = "openai"
"""The tool call parser that reads the messages the openai_gptoss reasoning parser hands on (needs the split)."""


@dataclass(frozen=True)
class ToolCallParsing:
    """How one request's answer is parsed for tool calls."""

    parser: str
    """The server's --tool-call-parser: a name in tool_calls.parsers.PARSERS."""
    names: frozenset[str]
    """The request's tools' names: a call of another function is not a call."""
    parallel: bool = True
    """False (parallel_tool_calls false): only the first call is kept."""


def tool_call_parsing(pb: generation_pb2.GenerateRequest, server_parser: str | None,
                      split: bool) -> ToolCallParsing | None:
    """How ``pb``'s output is parsed for calls, None when it is not. ``server_parser``: the server's
    --tool-call-parser; ``split``: whether the output's thinking is split off (the harmony parser reads the split's
    content). Unset ``parse_tool_calls``: a chat prompt's output is parsed when it gives tools and the server has a
    parser that can read it. Raises InvalidRequestError for parsing that cannot be, or parallel_tool_calls without
    parsing."""
    names: frozenset[str] = frozenset()
    if not pb.HasField("parse_tool_calls"):
        can_read = server_parser is not None and (split or server_parser != HARMONY_PARSER)
        names = _tool_names(pb) if can_read else frozenset()  # (the tools' JSON is read only when it may matter)
        wanted = bool(names)
    else:
        wanted = pb.parse_tool_calls
        if wanted:
            names = _tool_names(pb)
            _check_possible(server_parser, names, split)
    if not wanted:
        if pb.HasField("parallel_tool_calls"):
            raise InvalidRequestError("parallel_tool_calls", "only applies when tool calls are parsed "
                                                             "(parse_tool_calls), and this request's are not")
        return None
    assert server_parser is not None
    parallel = pb.parallel_tool_calls if pb.HasField("parallel_tool_calls") else True
    return ToolCallParsing(server_parser, names, parallel)


def _check_possible(server_parser: str | None, names: frozenset[str], split: bool) -> None:
    if server_parser is None:
        raise InvalidRequestError("parse_tool_calls", "this server has no --tool-call-parser to read tool calls with")
    if not names:
        raise InvalidRequestError("parse_tool_calls", "needs a chat prompt whose chat.tools_json names at least one "
                                                      "function")
    if server_parser == HARMONY_PARSER and not split:
        raise InvalidRequestError("parse_tool_calls", "the openai tool call parser reads the harmony messages the "
                                                      "openai_gptoss reasoning parser hands on: the output must be "
                                                      "split too (split_reasoning)")


def _tool_names(pb: generation_pb2.GenerateRequest) -> frozenset[str]:
    """The names of a chat prompt's tools (OpenAI's shape ``{"type": "function", "function": {"name": ...}}``, or a
    bare ``{"name": ...}``); empty without a chat prompt or tools. The JSON is checked where the prompt is rendered."""
    if pb.WhichOneof("prompt") != "chat" or not pb.chat.tools_json:
        return frozenset()
    try:
        tools = json.loads(pb.chat.tools_json)
    except (ValueError, RecursionError):
        return frozenset()
    if not isinstance(tools, list):
        return frozenset()
    return frozenset(name for name in map(_tool_name, tools) if name)


def _tool_name(tool: Any) -> str:
    if not isinstance(tool, dict):
        return ""
    function = tool.get("function", tool)
    name = function.get("name") if isinstance(function, dict) else None
    return name if isinstance(name, str) else ""
