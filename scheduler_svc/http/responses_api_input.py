"""A Responses API request as the chat completion request it asks for, so that it runs the chat endpoint's checks
and plan (conversion.chat_plan); problems are named by the Responses API's own parameters.

``input`` items become chat messages: ``{"role", "content"}`` or ``{"type": "message", ...}`` (roles user, system,
developer, which the template receives as system, and assistant; content a string or a list of ``input_text`` /
``output_text`` parts, joined); a ``function_call`` joins the assistant message before it (or starts one) as a tool
call (its ``call_id`` the call's id); a ``function_call_output`` is a tool message answering ``call_id``; a
``reasoning`` item's text is the ``reasoning_content`` of the assistant message that follows it. Other items and
content parts (images, files, item references) are refused by name. ``previous_response_id`` puts a stored response's
conversation (response_store.py) before the input; its instructions are not carried over.
"""

from __future__ import annotations

from typing import Any

import grpc

from scheduler_svc.http.errors import ApiError, invalid, string_field
from scheduler_svc.http.param_names import ParamNames, validated_chat
from scheduler_svc.http.protocol import ChatCompletionRequest
from scheduler_svc.http.response_store import ResponseStore
from scheduler_svc.http.responses_api_protocol import ResponsesPrompt, ResponsesRequest

TEXT_PARTS = ("input_text", "output_text", "text")
ROLES = {"user": "user", "system": "system", "developer": "system", "assistant": "assistant"}
OUTPUT_LOGPROBS = "message.output_text.logprobs"
"""The one ``include`` value served."""
RENAMES = ((r"^max_completion_tokens", "max_output_tokens"), (r"^response_format(\.json_schema)?", "text.format"),
           (r"^reasoning_effort", "reasoning.effort"), (r"^messages$", "input"),
           (r"^logprobs", "include"),
           (r"^tools\[(\d+)\]\.function\.", r"tools[\1]."))
"""The chat parameters the Responses API names otherwise (its messages: by where each came from)."""


def chat_of_response(body: ResponsesRequest, store: ResponseStore) -> tuple[ChatCompletionRequest, ParamNames]:
    """The chat request of ``body`` (after the stored conversation it continues) and its parameters' Responses
    names; ApiError naming the Responses parameter that cannot be served."""
    if body.store and not store.enabled:
        raise invalid("store", "this server keeps no responses (started with --responses-store-size 0): send store "
                               "false (or leave it out) and give the conversation in input")
    if body.background:
        if body.store is False or not store.enabled:
            raise invalid("background", "a background response is fetched from the store: it needs store true (or "
                                        "unset) on a server that keeps responses (--responses-store-size above 0)")
        if body.stream:
            raise invalid("stream", "is not served with background: poll GET /v1/responses/{id} until its status "
                                    "is no longer queued or in_progress")
    fields, names = prompt_fields(body, store)
    fields.update({"max_completion_tokens": body.max_output_tokens, "temperature": body.temperature,
                   "top_p": body.top_p, "stream": body.stream, "metadata": body.metadata, "user": body.user})
    if wants_logprobs(body):
        fields.update({"logprobs": True, "top_logprobs": body.top_logprobs or 0})
    if body.stream:
        fields["stream_options"] = {"include_usage": True}  # response.completed carries the usage
    return validated_chat(fields, names), names


def wants_logprobs(body: ResponsesRequest) -> bool:
    """Whether the output text's logprobs are asked for (``include`` or ``top_logprobs``); ApiError naming an
    ``include`` value that is not served."""
    for index, value in enumerate(body.include or []):
        if value != OUTPUT_LOGPROBS:
            raise invalid(f"include[{index}]", f"{value!r} is not served (only {OUTPUT_LOGPROBS!r} is)")
    return bool(body.include) or body.top_logprobs is not None


def check_logprobs_servable(body: ResponsesRequest, chat: ChatCompletionRequest, reasoning_parser: str | None) -> None:
    """ApiError naming the parameter that asked for logprobs when the output may be more than text: the chat
    endpoint's logprobs cover every token, the thinking's and the calls' too, not the answer's text alone."""
    if not chat.logprobs:
        return
    param = "include" if body.include else "top_logprobs"
    if reasoning_parser is not None:
        raise invalid(param, f"the output text's logprobs are not served while this server splits the thinking off "
                             f"(--reasoning-parser {reasoning_parser}): they would mix the thinking's tokens in")
    if chat.tools and chat.tool_choice != "none":
        raise invalid(param, 'the output text\'s logprobs are not served with tools (tool_choice "none" leaves '
                             "them out)")


def prompt_fields(body: ResponsesPrompt, store: ResponseStore) -> tuple[dict[str, Any], ParamNames]:
    """The chat request's fields that make the prompt (model, messages, tools, format, effort), and the Responses
    names of its parameters."""
    if body.truncation == "auto":
        raise invalid("truncation", '"auto" is not served: a conversation too long for the context is refused '
                                    '("disabled")')
    messages, params = _messages(body, earlier_items(body, store))
    fields: dict[str, Any] = {
        "model": body.model, "messages": messages, "parallel_tool_calls": body.parallel_tool_calls,
        "tools": _tools(body), "tool_choice": _tool_choice(body.tool_choice), "response_format": _response_format(body),
        "reasoning_effort": body.reasoning.effort if body.reasoning else None,
    }
    return fields, ParamNames(tuple(params), RENAMES)


def earlier_items(body: ResponsesPrompt, store: ResponseStore) -> tuple[dict[str, Any], ...]:
    """The conversation ``previous_response_id`` continues, as input items (none without one); ApiError naming it
    when this server stores nothing (400) or not that response (404)."""
    previous = body.previous_response_id
    if not previous:
        return ()
    if not store.enabled:
        raise invalid("previous_response_id", "this server keeps no responses to continue (started with "
                                              "--responses-store-size 0): give the conversation in input")
    stored = store.get(previous)
    if stored is None:
        raise ApiError(grpc.StatusCode.NOT_FOUND, f"previous_response_id: no stored response {previous!r} (never "
                       f"stored, deleted, or evicted: this server keeps the last {store.capacity})",
                       param="previous_response_id")
    return stored.items


def _messages(body: ResponsesPrompt, earlier: tuple[dict[str, Any], ...]) -> tuple[list[dict[str, Any]], list[str]]:
    messages: list[dict[str, Any]] = []
    params: list[str] = []
    if body.instructions:
        messages.append({"role": "system", "content": body.instructions})
        params.append("instructions")
    if isinstance(body.input, list) and not body.input:
        raise invalid("input", "at least one item is required")
    items = [(item, "previous_response_id") for item in earlier]
    if isinstance(body.input, str):
        items.append(({"role": "user", "content": body.input}, "input"))
    else:  # (None: input_tokens counts instructions, tools and the earlier turns alone)
        items += [(item, f"input[{index}]") for index, item in enumerate(body.input or [])]
    reasoning: tuple[str, str] | None = None
    """A reasoning item's text waiting for the assistant message it belongs to, and the item's parameter."""
    for item, param in items:
        kind = item.get("type", "message" if "role" in item else None)
        if kind == "reasoning":
            reasoning = (_reasoning_text(item, param), param)
            continue
        if kind == "message":
            message = _message(item, param)
        elif kind == "function_call":
            _add_call(messages, params, item, param)
            message = None
        elif kind == "function_call_output":
            message = {"role": "tool", "tool_call_id": string_field(item, "call_id", param),
                       "content": _content(item.get("output"), f"{param}.output")}
        else:
            raise invalid(f"{param}.type", f"{kind!r} items are not served (message, function_call, "
                                           "function_call_output and reasoning are)")
        if message is not None:
            messages.append(message)
            params.append(param)
        reasoning = _give_reasoning(messages, reasoning)
    if reasoning is not None:
        raise invalid(reasoning[1], "a reasoning item must come before the assistant message or function call it "
                                    "thought about")
    return messages, params


def _give_reasoning(messages: list[dict[str, Any]], reasoning: tuple[str, str] | None) -> tuple[str, str] | None:
    """The waiting reasoning given to the last message when it is the assistant's; None once given."""
    if reasoning is None or messages[-1]["role"] != "assistant":
        return reasoning
    messages[-1]["reasoning_content"] = reasoning[0]
    return None


def _message(item: dict[str, Any], param: str) -> dict[str, Any]:
    role = item.get("role")
    if role not in ROLES:
        raise invalid(f"{param}.role", f"must be one of {', '.join(ROLES)}, got {role!r}")
    return {"role": ROLES[role], "content": _content(item.get("content"), f"{param}.content")}


def _content(content: Any, param: str) -> str:
    """A string, or a list of text parts joined."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise invalid(param, f"must be a string or a list of text parts, got {type(content).__name__}")
    texts = []
    for index, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in TEXT_PARTS or not isinstance(part.get("text"), str):
            raise invalid(f"{param}[{index}]", f"only text parts ({', '.join(TEXT_PARTS[:2])} with a string text) are "
                                               f"served, got {kind!r}")
        texts.append(part["text"])
    return "".join(texts)


def _add_call(messages: list[dict[str, Any]], params: list[str], item: dict[str, Any], param: str) -> None:
    """A function_call item as a tool call of the assistant message before it, or of a new one."""
    call = {"id": string_field(item, "call_id", param), "type": "function",
            "function": {"name": string_field(item, "name", param),
                         "arguments": string_field(item, "arguments", param)}}
    if messages and messages[-1]["role"] == "assistant":
        messages[-1].setdefault("tool_calls", []).append(call)
        return
    messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
    params.append(param)


def _reasoning_text(item: dict[str, Any], param: str) -> str:
    """A reasoning item's text: its ``content`` parts' (``reasoning_text``), else its ``summary`` parts'."""
    for key in ("content", "summary"):
        parts = item.get(key) or []
        if not isinstance(parts, list) or not all(isinstance(p, dict) and isinstance(p.get("text"), str)
                                                  for p in parts):
            raise invalid(f"{param}.{key}", "must be a list of parts with a string text")
        if parts:
            return "".join(part["text"] for part in parts)
    return ""


def _tools(body: ResponsesPrompt) -> list[dict[str, Any]] | None:
    if not body.tools:
        return None
    tools = []
    for index, tool in enumerate(body.tools):
        if tool.type != "function":
            raise invalid(f"tools[{index}].type", f'only function tools are served (type "function"), got '
                                                  f"{tool.type!r}")
        function = {"name": tool.name or "", "description": tool.description, "parameters": tool.parameters,
                    "strict": tool.strict}
        tools.append({"type": "function", "function": {k: v for k, v in function.items() if v is not None}})
    return tools


def _tool_choice(choice: str | dict[str, Any] | None) -> str | dict[str, Any] | None:
    """A named function ``{"type": "function", "name": N}`` as chat's ``{"type": "function", "function": {"name":
    N}}``; strings as they are."""
    if not isinstance(choice, dict):
        return choice
    if choice.get("type") != "function":
        raise invalid("tool_choice", f'a named choice has type "function", got {choice.get("type")!r}')
    extra = [key for key in choice if key not in ("type", "name")]
    if extra or not isinstance(choice.get("name"), str):
        raise invalid("tool_choice", 'a named choice is {"type": "function", "name": ...}')
    return {"type": "function", "function": {"name": choice["name"]}}


def _response_format(body: ResponsesPrompt) -> dict[str, Any] | None:
    text_format = body.text.format if body.text else None
    if text_format is None or text_format.type == "text":
        return None
    if text_format.type == "json_object":
        return {"type": "json_object"}
    schema = {"name": text_format.name, "schema": text_format.schema_, "description": text_format.description,
              "strict": text_format.strict}
    return {"type": "json_schema", "json_schema": {k: v for k, v in schema.items() if v is not None}}
