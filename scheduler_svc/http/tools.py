"""Tool calling (OpenAI's function calling): on structured output, as vLLM serves it without a model-specific
parser, and, with the server's ``--tool-call-parser`` (hermes, llama3_json, pythonic, mistral or openai), parsed from
free text (vLLM's ``--enable-auto-tool-choice --tool-call-parser NAME``).

A chat request's ``tools`` (function tools only) and ``tool_choice`` decide what the output is:

- a named function (``{"type": "function", "function": {"name": N}}``): the output is N's arguments, constrained
  to its ``parameters`` schema (``sampling.structured_output.json_schema``); the response's message has
  ``content: null`` and one tool call whose ``arguments`` is the generated JSON text, ``finish_reason`` as the engine
  ended it ("stop": OpenAI's for a forced function);
- "required": the output is a JSON array (at least one item; at most one with ``parallel_tool_calls: false``) of
  ``{"name": <one of the tools' names>, "parameters": <that tool's arguments>}``, constrained by one schema over
  every tool (their ``$defs`` gathered at its root, where their ``$ref``s point); the response parses it into one
  tool call per item (``arguments`` = the parameters written compactly, as the constrained output is), with
  ``finish_reason`` "tool_calls". Output cut short (``max_tokens``, a stop string, an abort) does not parse: it is
  returned as ``content`` with the engine's finish reason;
- "none": free text, and the tools are not shown to the chat template;
- "auto" (OpenAI's default when ``tools`` is given): free text, which may hold calls in the model's own syntax.
  The server's ``--tool-call-parser`` reads the finished output in the model's syntax (tool_calls/parsers.py):
  ``hermes``, ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` blocks (tool_calls/hermes.py);
  ``llama3_json``, JSON objects maybe after ``<|python_tag|>``, separated by ``;`` (tool_calls/llama3_json.py);
  ``pythonic``, a Python list of calls (tool_calls/pythonic.py); ``mistral``, ``[TOOL_CALLS]`` and a JSON array
  (tool_calls/mistral.py); ``openai``, gpt-oss's harmony messages addressed to a function
  (tool_calls/harmony.py). The text before the calls is the ``content`` (trailing whitespace dropped, null when
  blank; pythonic calls are the whole output), each call a tool call (at most one with ``parallel_tool_calls:
  false``), ``finish_reason`` "tool_calls"; an output whose calls do not parse, are cut short or call a function
  not among the tools is returned whole as ``content``, with the engine's finish reason. Special tokens are kept
  in the text unless the request sets ``skip_special_tokens`` (some models' ``<tool_call>``, ``<|python_tag|>`` or
  ``[TOOL_CALLS]`` is one), as vLLM does. Without a parser "auto" is refused (400 naming ``tool_choice``): telling
  a call from text needs one.

The chat template receives the tools (``ChatPrompt.tools_json``, OpenAI's shape, ``parameters`` filled in when
absent) unless tool_choice is "none", an assistant message's ``tool_calls`` and a tool message's ``tool_call_id``.
Tool call ids are ``call_`` and 24 random hex digits.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from scheduler_svc.config import TOOL_CALL_PARSERS
from scheduler_svc.http.errors import ApiError, invalid
from scheduler_svc.http.protocol import ChatCompletionRequest, ChatMessage, Tool
from scheduler_svc.http.unrecognized import is_neutral
from scheduler_svc.request_errors import InvalidRequestError
from scheduler_svc.tokenizer import Tokenizer
from scheduler_svc.tool_calls.common import new_call_id
from scheduler_svc.validation import ModelLimits, check_structured_output
from stepahead_proto import sampling_pb2

DEFAULT_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {}}
"""The arguments of a function defined without ``parameters``: an object with no properties, as OpenAI reads it."""
TOOL_CHOICES = ("none", "auto", "required")
_DEFS_KEYS = ("$defs", "definitions")
_AUTO_REFUSED = ('"auto" (the default with tools) needs a parser of the model\'s own tool call syntax: start the '
                 f"server with --tool-call-parser {TOOL_CALL_PARSERS[0]} (or {', '.join(TOOL_CALL_PARSERS[1:])}), "
                 'or use "required" (the output is one or more calls), a named function ({"type": "function", '
                 '"function": {"name": ...}}) or "none" for text')


@dataclass(frozen=True)
class ToolCalling:
    """How a chat request's tool_choice makes its output tool calls: constrained to them ("named", "required"), or
    free text they are parsed from ("auto")."""

    mode: Literal["named", "required", "auto"]
    structured_output: sampling_pb2.StructuredOutput | None
    """The format of the output: the named function's parameters, or the array of calls; None ("auto"): free."""
    schema_param: str
    """The parameter a problem with the format names: ``tools[i].function.parameters`` of the named function, or
    ``tools`` for "required" (see locate_schema_error); "" for "auto"."""
    function: str = ""
    """The named function (mode "named")."""
    tool_schemas: tuple[str, ...] = ()
    """Each tool's parameters schema as JSON text (mode "required"), to find the one a format problem comes from."""
    names: frozenset[str] = frozenset()
    """The tools' names (mode "auto"): a block calling another function is not a call."""
    parser: str = ""
    """The server's --tool-call-parser (mode "auto"): the name of the model's syntax in tool_calls.parsers.PARSERS."""
    parallel: bool = True
    """``parallel_tool_calls`` (mode "auto"): False keeps the first call only."""


@dataclass(frozen=True)
class ChatTools:
    """What a chat request's tools give the chat template and its output."""

    tools_json: str = ""
    """ChatPrompt.tools_json ("": the template gets no tools)."""
    calling: ToolCalling | None = None
    """None: free text."""


@dataclass(frozen=True)
class _Function:
    index: int
    name: str
    parameters: dict[str, Any]
    template: dict[str, Any]
    """The tool as the chat template receives it."""


# ---- requests ---------------------------------------------------------------------------------------------------
def chat_tools(body: ChatCompletionRequest, tool_call_parser: str | None = None) -> ChatTools:
    """The tools of a chat request, checked; ApiError (400) naming the parameter otherwise. ``tool_call_parser``:
    the server's ``--tool-call-parser`` (None: "auto" is refused)."""
    functions = _functions(body.tools or [])
    choice = body.tool_choice
    if isinstance(choice, str) and choice not in TOOL_CHOICES:
        raise invalid("tool_choice", f'must be "none", "auto", "required" or a named function, got {choice!r}')
    if not functions:
        if choice in (None, "none", "auto"):
            return ChatTools()
        raise invalid("tool_choice", "needs tools: no tools are given")
    if choice is None or choice == "auto":
        if tool_call_parser not in TOOL_CALL_PARSERS:
            raise invalid("tool_choice", _AUTO_REFUSED)
        names = frozenset(function.name for function in functions)
        return ChatTools(_tools_json(functions), ToolCalling("auto", None, "", names=names, parser=tool_call_parser,
                                                             parallel=body.parallel_tool_calls is not False))
    if choice == "none":
        return ChatTools()
    if choice == "required":
        calling = _required(functions, body.parallel_tool_calls)
    else:
        assert isinstance(choice, dict)  # the protocol's type: a string or an object
        calling = _named(functions, _named_function(choice))
    return ChatTools(_tools_json(functions), calling)


def template_tools(tools: list[Tool] | None) -> str:
    """``tools`` as ChatPrompt.tools_json, checked as chat_tools checks them ("" for none)."""
    return _tools_json(_functions(tools or []))


def _tools_json(functions: list[_Function]) -> str:
    return json.dumps([function.template for function in functions], ensure_ascii=False) if functions else ""


def _functions(tools: list[Tool]) -> list[_Function]:
    """Each tool as a function: type "function", a non-empty name no other tool has."""
    functions: list[_Function] = []
    seen: dict[str, int] = {}
    for index, tool in enumerate(tools):
        param = f"tools[{index}]"
        if tool.type != "function":
            raise invalid(f"{param}.type", f'only function tools are supported (type "function"), got {tool.type!r}')
        if tool.function is None:
            raise invalid(f"{param}.function", "is required")
        name = tool.function.name
        if not name:
            raise invalid(f"{param}.function.name", "must not be empty")
        if name in seen:
            raise invalid(f"{param}.function.name", f"{name!r} is also the name of tools[{seen[name]}]")
        seen[name] = index
        parameters = DEFAULT_PARAMETERS if tool.function.parameters is None else tool.function.parameters
        template = tool.function.model_dump(exclude_none=True) | {"parameters": parameters}
        functions.append(_Function(index, name, parameters, {"type": "function", "function": template}))
    return functions


def _named_function(choice: dict[str, Any]) -> str:
    """The name in ``{"type": "function", "function": {"name": N}}``."""
    if choice.get("type") != "function":
        raise invalid("tool_choice", f'a named choice has type "function", got {choice.get("type")!r}')
    function = choice.get("function")
    name = function.get("name") if isinstance(function, dict) else None
    if not isinstance(name, str):
        raise invalid("tool_choice", 'a named choice needs function.name: {"type": "function", "function": '
                                     '{"name": ...}}')
    assert isinstance(function, dict)
    extra = [key for key, value in choice.items() if key not in ("type", "function") and not is_neutral(value)]
    extra += [f"function.{key}" for key, value in function.items() if key != "name" and not is_neutral(value)]
    if extra:
        raise invalid("tool_choice", f"unrecognized field {extra[0]!r} (a named choice has type and function.name)")
    return name


def _named(functions: list[_Function], name: str) -> ToolCalling:
    for function in functions:
        if function.name == name:
            schema = sampling_pb2.StructuredOutput(json_schema=json.dumps(function.parameters))
            return ToolCalling("named", schema, f"tools[{function.index}].function.parameters", function=name)
    known = ", ".join(repr(function.name) for function in functions)
    raise invalid("tool_choice", f"names the function {name!r}, which is not among the tools ({known})")


def _required(functions: list[_Function], parallel_tool_calls: bool | None) -> ToolCalling:
    """One schema for an array of calls of any of the tools (vLLM's), their $defs gathered at its root."""
    defs: dict[str, dict[str, Any]] = {key: {} for key in _DEFS_KEYS}
    items = []
    for function in functions:
        parameters = dict(function.parameters)
        for key in _DEFS_KEYS:
            _gather_defs(defs[key], parameters.pop(key, None), key, function.index)
        items.append({"type": "object", "properties": {"name": {"const": function.name}, "parameters": parameters},
                      "required": ["name", "parameters"], "additionalProperties": False})
    schema: dict[str, Any] = {"type": "array", "minItems": 1, "items": {"anyOf": items}}
    if parallel_tool_calls is False:
        schema["maxItems"] = 1
    schema.update((key, found) for key, found in defs.items() if found)
    schemas = tuple(json.dumps(function.parameters) for function in functions)
    return ToolCalling("required", sampling_pb2.StructuredOutput(json_schema=json.dumps(schema)), "tools",
                       tool_schemas=schemas)


def _gather_defs(gathered: dict[str, Any], defs: Any, key: str, index: int) -> None:
    param = f"tools[{index}].function.parameters"
    if defs is None:
        return
    if not isinstance(defs, dict):
        raise invalid(param, f"{key} must be an object")
    for name, schema in defs.items():
        if name in gathered and gathered[name] != schema:
            raise invalid(param, f'{key} {name!r} differs from another tool\'s: tool_choice "required" puts every '
                                 f"tool's {key} in one schema")
        gathered[name] = schema


def locate_schema_error(calling: ToolCalling, tokenizer: Tokenizer, limits: ModelLimits,
                        error: InvalidRequestError) -> ApiError | None:
    """For tool_choice "required", the 400 naming the tool whose parameters make ``error`` (a problem with the
    calls' format), or naming ``tools`` when no one tool's do; None when ``error`` is not about the format."""
    if calling.mode != "required" or not error.field.startswith("sampling.structured_output."):
        return None
    for index, schema in enumerate(calling.tool_schemas):
        try:
            check_structured_output(sampling_pb2.StructuredOutput(json_schema=schema), tokenizer, limits)
        except InvalidRequestError as found:
            return invalid(f"tools[{index}].function.parameters", found.reason)
    return invalid("tools", f'the schema of tool_choice "required" (every tool\'s parameters): {error.reason}')


def message_tool_calls(message: ChatMessage, index: int) -> str:
    """An HTTP message's ``tool_calls`` as ChatMessage.tool_calls_json ("" for none)."""
    if not message.tool_calls:
        return ""
    calls = []
    for call_index, call in enumerate(message.tool_calls):
        param = f"messages[{index}].tool_calls[{call_index}]"
        if call.type != "function":
            raise invalid(f"{param}.type", f'only function calls are supported (type "function"), got {call.type!r}')
        if call.function is None:
            raise invalid(f"{param}.function", "is required")
        calls.append(call.model_dump(exclude_none=True))
    return json.dumps(calls, ensure_ascii=False)


# ---- responses --------------------------------------------------------------------------------------------------
def tool_call(name: str, arguments: str, call_id: str | None = None) -> dict[str, Any]:
    """A response's tool call object."""
    return {"id": call_id or new_call_id(), "type": "function", "function": {"name": name, "arguments": arguments}}


def output_calls(calling: ToolCalling, text: str, finish_reason: str | None,
                 call_id: str = "") -> tuple[list[dict[str, Any]] | None, str | None]:
    """A finished choice's tool calls and finish reason; (None, the engine's finish reason) when the output of
    tool_choice "required" does not parse (cut short): it is returned as content."""
    if calling.mode == "named":
        return [tool_call(calling.function, text, call_id)], finish_reason
    calls = parse_required(text)
    if calls is None:
        return None, finish_reason
    return [tool_call(name, arguments) for name, arguments in calls], "tool_calls"


def parse_required(text: str) -> list[tuple[str, str]] | None:
    """The (name, arguments) of each call in the output of tool_choice "required"; None when it is not such an
    array (cut short)."""
    try:
        calls = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if not isinstance(calls, list) or not calls:
        return None
    parsed = []
    for call in calls:
        if not isinstance(call, dict) or not isinstance(call.get("name"), str) or "parameters" not in call:
            return None
        parsed.append((call["name"], json.dumps(call["parameters"], ensure_ascii=False)))
    return parsed
