"""A Messages API request as the chat completion request it asks for, so that it runs the chat endpoint's checks and
plan (conversion.chat_plan); problems are named by the Messages API's own parameters.

``system`` (a string or text blocks) is a system message first. Each message's content is a string or a list of
blocks: ``text``; an assistant's ``tool_use`` (a tool call: its ``id``, ``name`` and ``input`` object) and
``thinking`` (its ``reasoning_content``); a user's ``tool_result`` (a tool message answering ``tool_use_id``; its
content a string or text blocks), given before the user's text. Images, documents and other blocks are refused by
name. ``tool_choice``: ``auto``, ``any`` (chat's "required"), ``tool`` (a named function) or ``none``;
``disable_parallel_tool_use`` keeps one call. ``output_config.format`` is chat's json_schema ``response_format``,
``output_config.effort`` its ``reasoning_effort``; ``thinking`` "disabled" is ``enable_thinking: false`` for the
template, "enabled" ``enable_thinking: true`` and its ``budget_tokens`` chat's ``thinking_token_budget`` (less than
``max_tokens``, as Anthropic requires), ``display: "omitted"`` chat's ``include_reasoning: false``.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import ValidationError

from scheduler_svc.http.errors import from_validation_error, invalid, string_field
from scheduler_svc.http.messages_api_protocol import CacheControl, MessagesPrompt, MessagesRequest, ThinkingConfig
from scheduler_svc.http.param_names import ParamNames, validated_chat
from scheduler_svc.http.protocol import ChatCompletionRequest

RENAMES = ((r"^max_completion_tokens", "max_tokens"), (r"^stop\b", "stop_sequences"),
           (r"^response_format(\.json_schema)?", "output_config.format"),
           (r"^reasoning_effort", "output_config.effort"), (r"^chat_template_kwargs", "thinking"),
           (r"^parallel_tool_calls", "tool_choice.disable_parallel_tool_use"),
           (r"^thinking_token_budget", "thinking.budget_tokens"),
           (r"^tools\[(\d+)\]\.function\.parameters", r"tools[\1].input_schema"),
           (r"^tools\[(\d+)\]\.function\.", r"tools[\1]."))
"""The chat parameters the Messages API names otherwise (its messages: by where each came from)."""
_CHOICES = {"auto": "auto", "any": "required", "none": "none"}


def chat_of_messages(body: MessagesRequest) -> tuple[ChatCompletionRequest, ParamNames]:
    """The chat request of ``body`` and its parameters' Messages API names; ApiError (400) naming the parameter that
    cannot be served."""
    fields, params = prompt_fields(body)
    output = body.output_config
    fields.update({
        "max_completion_tokens": body.max_tokens, "temperature": body.temperature, "top_p": body.top_p,
        "top_k": body.top_k, "stop": body.stop_sequences, "stream": body.stream,
        "reasoning_effort": output.effort if output else None,
        "thinking_token_budget": _thinking_budget(body),
    })
    if output is not None and output.format is not None:
        fields["response_format"] = {"type": "json_schema",
                                     "json_schema": {"name": "output", "schema": output.format.schema_}}
    if body.stream:
        fields["stream_options"] = {"include_usage": True}  # message_delta carries the output tokens
    names = ParamNames(tuple(params), RENAMES)
    return validated_chat(fields, names), names


def prompt_fields(body: MessagesPrompt) -> tuple[dict[str, Any], list[str]]:
    """The chat request's fields that make its prompt (model, messages, tools, the template's thinking switch),
    and where each chat message came from."""
    thinking = body.thinking
    if thinking is not None and thinking.type == "enabled" and thinking.budget_tokens is None:
        raise invalid("thinking.budget_tokens", 'is required with type "enabled" (or "adaptive": the model thinks as '
                                                'its chat template says)')
    if thinking is not None and thinking.type != "enabled" and thinking.budget_tokens is not None:
        raise invalid("thinking.budget_tokens", 'is only allowed with type "enabled"')
    messages, params = _messages(body)
    choice, parallel = _tool_choice(body.tool_choice)
    fields = {
        "model": body.model, "messages": messages, "tools": _tools(body), "tool_choice": choice,
        "parallel_tool_calls": parallel,
        "include_reasoning": False if thinking is not None and thinking.display == "omitted" else None,
        "chat_template_kwargs": _thinking_switch(thinking),
    }
    return fields, params


def _thinking_switch(thinking: ThinkingConfig | None) -> dict[str, bool] | None:
    """The chat template's ``enable_thinking`` for ``thinking`` "enabled" or "disabled" (None: as the template
    says)."""
    if thinking is None or thinking.type == "adaptive":
        return None
    return {"enable_thinking": thinking.type == "enabled"}


def _thinking_budget(body: MessagesRequest) -> int | None:
    """``thinking.budget_tokens`` (with type "enabled"), which must leave room for the answer under max_tokens."""
    budget = body.thinking.budget_tokens if body.thinking is not None else None
    if budget is not None and budget >= body.max_tokens:
        raise invalid("thinking.budget_tokens", f"must be less than max_tokens ({body.max_tokens}), got {budget}")
    return budget


def _messages(body: MessagesPrompt) -> tuple[list[dict[str, Any]], list[str]]:
    messages: list[dict[str, Any]] = []
    params: list[str] = []
    if body.system:
        messages.append({"role": "system", "content": _text(body.system, "system")})
        params.append("system")
    if not body.messages:
        raise invalid("messages", "at least one message is required")
    for index, message in enumerate(body.messages):
        param = f"messages[{index}]"
        role = message.get("role")
        if role not in ("user", "assistant"):
            raise invalid(f"{param}.role", f'must be "user" or "assistant", got {role!r}')
        turn = _assistant(message.get("content"), param) if role == "assistant" else _user(message.get("content"),
                                                                                            param)
        messages += turn
        params += [param] * len(turn)
    return messages, params


def _blocks(content: Any, param: str) -> list[dict[str, Any]]:
    """A message's content as blocks (a string is one text block)."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list) or not all(isinstance(block, dict) for block in content):
        raise invalid(f"{param}.content", "must be a string or a list of content blocks")
    for index, block in enumerate(content):
        _check_cache_control(block, f"{param}.content[{index}]")
    return content


def _check_cache_control(block: dict[str, Any], where: str) -> None:
    """A block's ``cache_control``, if any, must be one Anthropic defines (it changes nothing here)."""
    value = block.get("cache_control")
    if value is None:
        return
    where = f"{where}.cache_control"
    if not isinstance(value, dict):
        raise invalid(where, 'must be an object: {"type": "ephemeral"} (with "ttl" "5m" or "1h")')
    try:
        CacheControl.model_validate(value)
    except ValidationError as error:
        problem = from_validation_error(error)
        raise invalid(f"{where}.{problem.param}", problem.message.removeprefix(f"{problem.param}: ")) from None


def _user(content: Any, param: str) -> list[dict[str, Any]]:
    """A user turn: a tool message per tool_result block, then the text (if any)."""
    results, texts = [], []
    for index, block in enumerate(_blocks(content, param)):
        where = f"{param}.content[{index}]"
        if block.get("type") == "tool_result":
            results.append({"role": "tool", "tool_call_id": string_field(block, "tool_use_id", where),
                            "content": _text(block.get("content", ""), f"{where}.content")})
        else:
            texts.append(_text_block(block, where))
    return results + ([{"role": "user", "content": "".join(texts)}] if texts or not results else [])


def _assistant(content: Any, param: str) -> list[dict[str, Any]]:
    """An assistant turn: its text, tool calls and thinking as one message."""
    message: dict[str, Any] = {"role": "assistant", "content": ""}
    for index, block in enumerate(_blocks(content, param)):
        where = f"{param}.content[{index}]"
        kind = block.get("type")
        if kind == "tool_use":
            arguments = block.get("input", {})
            if not isinstance(arguments, dict):
                raise invalid(f"{where}.input", "must be an object")
            message.setdefault("tool_calls", []).append({
                "id": string_field(block, "id", where), "type": "function",
                "function": {"name": string_field(block, "name", where), "arguments": json.dumps(arguments)}})
        elif kind == "thinking":
            thinking = string_field(block, "thinking", where)
            message["reasoning_content"] = message.get("reasoning_content", "") + thinking
        else:
            message["content"] += _text_block(block, where)
    return [message]


def _text_block(block: dict[str, Any], where: str) -> str:
    if block.get("type") != "text" or not isinstance(block.get("text"), str):
        raise invalid(f"{where}.type", f"{block.get('type')!r} blocks are not served here (text, and tool_use, "
                                       "tool_result and thinking where they belong, are)")
    return str(block["text"])


def _text(content: Any, param: str) -> str:
    """A string, or text blocks joined."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise invalid(param, "must be a string or a list of text blocks")
    blocks = [block if isinstance(block, dict) else {} for block in content]
    for index, block in enumerate(blocks):
        _check_cache_control(block, f"{param}[{index}]")
    return "".join(_text_block(block, f"{param}[{index}]") for index, block in enumerate(blocks))


def _tools(body: MessagesPrompt) -> list[dict[str, Any]] | None:
    if not body.tools:
        return None
    tools = []
    for index, tool in enumerate(body.tools):
        if tool.type not in (None, "custom"):
            raise invalid(f"tools[{index}].type", f"only client tools are served (no type, or \"custom\"), got "
                                                  f"{tool.type!r}")
        function = {"name": tool.name, "description": tool.description, "parameters": tool.input_schema}
        tools.append({"type": "function", "function": {k: v for k, v in function.items() if v is not None}})
    return tools


def _tool_choice(choice: dict[str, Any] | None) -> tuple[str | dict[str, Any] | None, bool | None]:
    """Chat's tool_choice and parallel_tool_calls of Anthropic's tool_choice."""
    if choice is None:
        return None, None
    kind = choice.get("type")
    extra = [key for key in choice if key not in ("type", "name", "disable_parallel_tool_use")]
    if extra:
        raise invalid(f"tool_choice.{extra[0]}", "unrecognized field")
    parallel = False if choice.get("disable_parallel_tool_use") else None
    if kind == "tool":
        if not isinstance(choice.get("name"), str):
            raise invalid("tool_choice.name", 'a "tool" choice names the tool')
        return {"type": "function", "function": {"name": choice["name"]}}, parallel
    if kind not in _CHOICES:
        raise invalid("tool_choice.type", f'must be "auto", "any", "tool" or "none", got {kind!r}')
    return _CHOICES[kind], parallel
