"""Building GenerateRequest protos from keyword parameters, and the call metadata."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, TypedDict

from client.channels import auth_metadata
from client.tracing import trace_metadata
from stepahead_proto import generation_pb2, sampling_pb2


class GenerateOptions(TypedDict, total=False):
    """Optional keyword parameters of a generation; omitted or None: the server default.

    Sampling: temperature (0 = greedy), top_p, top_k (-1 = off), min_p, repetition_penalty,
    presence_penalty, frequency_penalty, seed, logprobs (number of top alternatives to return), logit_bias
    (a mapping of token id to a bias in [-100, 100] added to its logit).
    Token restrictions (vLLM's names; neither with a structured output format): allowed_token_ids (a list of token
    ids: only these may be sampled, EOS too only if listed; empty: all), bad_words (a list of words never generated,
    each as written or after a space; empty: none).
    Prompt scoring: prompt_logprobs (0..20): the log-probability of each prompt token after the first, given the
    tokens before it, plus that many top alternatives per position, from the raw logits; returned as the result's
    (and the first stream chunk's) prompt_logprobs. Such a request reuses no prefix-cached blocks.
    Stopping: max_tokens, min_tokens, stop (a string or several), stop_token_ids, ignore_eos,
    include_stop_str_in_output. Request: request_id ("" = server-assigned), model ("" or the served model's name:
    the base model; the name of a LoRA adapter the server serves, one of ModelInfo.lora_adapters: the base model with
    that adapter applied), skip_special_tokens, split_reasoning (with a server started with --reasoning-parser:
    the thinking comes back apart from the answer, as the result's `reasoning` and the chunks' `reasoning_text`;
    unset: chat prompts are split, and a structured output format then constrains the answer after the thinking
    where ModelInfo.format_after_thinking, else the whole output, unsplit; False: never split; True on a server
    without a parser, or with a format that cannot wait for the thinking, is an InvalidRequestError),
    thinking_token_budget (vLLM's: at most this many tokens of thinking, then the end of the thinking is forced and
    the model answers; needs a split output and ModelInfo.format_after_thinking, not with the openai_gptoss parser),
    disable_speculation (opt out of speculative decoding), prediction (OpenAI's predicted outputs: text the output is
    expected to largely repeat, such as a file being edited; its tokens serve as speculative drafts, so the output is
    unchanged, only faster where it follows the prediction; the result's usage.accepted_prediction_tokens and
    rejected_prediction_tokens count how it fared; not with disable_speculation, at most the model's context in
    tokens), priority (lower values start first and are preempted last; needs a server started with
    --scheduling-policy priority),
    truncate_prompt_tokens (keep only the prompt's last N tokens, after the chat template, dropping the oldest; -1:
    as many as the model's context allows, max_model_len - 1; unset: a prompt too long is refused; the result's
    prompt_tokens counts the tokens kept).
    Structured output (guided decoding; at most one, unset: free text): json_schema (a JSON Schema as a dict,
    serialized with json.dumps, or as JSON text: the output is one JSON value valid under it, written compactly as
    json.dumps writes it), json_object (True: any JSON object), regex (the whole output matches it; Rust `regex`
    syntax), choice (a list of strings: the output is exactly one of them), grammar (a context-free grammar, Lark
    syntax as llguidance reads it or GBNF). The server checks the format itself (a bad schema, regex or grammar is
    an InvalidRequestError naming it).
    Tools (with messages only): tools (OpenAI's tools array, a list of dicts such as {"type": "function",
    "function": {"name", "description", "parameters"}}, or its JSON text) is given to the chat template as `tools`.
    On a server started with --tool-call-parser (ModelInfo.tool_call_parser) the calls the model writes in its own
    syntax come back parsed, as the result's `tool_calls` (and the chunks'), each a ToolCall (id, name,
    arguments), and `text` holds the rest; parse_tool_calls (False: calls stay in the text; True on a server
    without a parser, or without tools, is an InvalidRequestError) and parallel_tool_calls (False: only the first
    call) choose. To force a call, constrain the output (json_schema=the tool's parameters). A message may carry an
    assistant's tool_calls and a tool's tool_call_id (see Message).
    Chat template controls (with messages only; vLLM's names): add_generation_prompt (unset: true, or false with
    continue_final_message; False renders no assistant header), continue_final_message (True: the last message, an
    assistant's, is continued: the prompt ends with its content unterminated, e.g. a prefilled "The capital is"),
    chat_template_kwargs (extra template variables, a dict such as {"enable_thinking": False} or its JSON text; the
    server refuses names it sets itself, such as messages or bos_token), documents (for retrieval-augmented
    generation: a list of dicts such as {"title": ..., "text": ...}, or its JSON text, given to the template as
    `documents`), chat_template (a Jinja template rendering this prompt instead of the model's; the server must run
    with --trust-request-chat-template).
    """

    request_id: str | None
    model: str | None
    temperature: float | None
    top_p: float | None
    top_k: int | None
    min_p: float | None
    repetition_penalty: float | None
    presence_penalty: float | None
    frequency_penalty: float | None
    seed: int | None
    logprobs: int | None
    prompt_logprobs: int | None
    logit_bias: Mapping[int, float] | None
    allowed_token_ids: Sequence[int] | None
    bad_words: Sequence[str] | None
    max_tokens: int | None
    min_tokens: int | None
    stop: str | Sequence[str] | None
    stop_token_ids: Sequence[int] | None
    ignore_eos: bool | None
    include_stop_str_in_output: bool | None
    skip_special_tokens: bool | None
    split_reasoning: bool | None
    thinking_token_budget: int | None
    disable_speculation: bool | None
    prediction: str | None
    priority: int | None
    truncate_prompt_tokens: int | None
    json_schema: Mapping[str, Any] | str | None
    json_object: bool | None
    regex: str | None
    choice: Sequence[str] | None
    grammar: str | None
    tools: Sequence[Mapping[str, Any]] | str | None
    parse_tool_calls: bool | None
    parallel_tool_calls: bool | None
    add_generation_prompt: bool | None
    continue_final_message: bool | None
    chat_template_kwargs: Mapping[str, Any] | str | None
    documents: Sequence[Mapping[str, Any]] | str | None
    chat_template: str | None


_SAMPLING_FIELDS = (
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "repetition_penalty",
    "presence_penalty",
    "frequency_penalty",
    "seed",
    "logprobs",
    "prompt_logprobs",
    "thinking_token_budget",
)
_STOPPING_SCALAR_FIELDS = ("max_tokens", "min_tokens", "ignore_eos", "include_stop_str_in_output")
STRUCTURED_OUTPUT_OPTIONS = ("json_schema", "json_object", "regex", "choice", "grammar")
"""The structured output options, each a kind of SamplingParams.structured_output: at most one may be given."""


class ChatMessageLike(Protocol):
    """Any object with string `role` and `content` attributes (e.g. a ChatMessage proto, whose `tool_calls_json`,
    `tool_call_id`, `name` and `reasoning_content` are kept too)."""

    role: str
    content: str


Message = Mapping[str, Any] | ChatMessageLike
"""A chat message: a mapping with "role" and "content" keys, or an object with those attributes.

A mapping may also carry OpenAI's "tool_calls" (an assistant's: a list of tool call dicts, or their JSON text;
its "content" may then be None or absent), "tool_call_id" (a tool message's), "name" (the author's) and
"reasoning_content" (an assistant's thinking, which templates such as Qwen3's read), which the chat template
receives."""


def build_generate_request(
    prompt: str | None = None,
    *,
    messages: Sequence[Message] | None = None,
    token_ids: Sequence[int] | None = None,
    **options: Any,
) -> generation_pb2.GenerateRequest:
    """Build a GenerateRequest from exactly one prompt form plus GenerateOptions.

    Raises:
        ValueError: not exactly one of prompt/messages/token_ids, an empty message list or
            token id list, or a malformed message.
        TypeError: an unknown option name.
    """
    _check_option_names(options)
    request = generation_pb2.GenerateRequest(
        request_id=options.get("request_id") or "",
        model=options.get("model") or "",
    )
    _set_prompt(request, prompt, messages, token_ids)
    if options.get("tools") is not None:
        if messages is None:
            raise ValueError("tools: only a chat prompt (messages) is given tools")
        request.chat.tools_json = _json_list(options["tools"], "tools")
    _set_template_options(request.chat if messages is not None else None, options)
    if options.get("skip_special_tokens") is not None:
        request.skip_special_tokens = options["skip_special_tokens"]
    if options.get("split_reasoning") is not None:
        request.split_reasoning = options["split_reasoning"]
    for name in ("parse_tool_calls", "parallel_tool_calls"):
        if options.get(name) is not None:
            _set_flag(request, name, options[name])
    if options.get("disable_speculation"):
        request.disable_speculation = True
    if options.get("prediction") is not None:
        if not isinstance(options["prediction"], str):
            raise ValueError(f"prediction: must be a string, got {type(options['prediction']).__name__}")
        request.prediction = options["prediction"]
    if options.get("priority") is not None:
        request.priority = options["priority"]
    if options.get("truncate_prompt_tokens") is not None:
        _set_field(request, "truncate_prompt_tokens", options["truncate_prompt_tokens"])
    request.sampling.CopyFrom(build_sampling_params(options))
    request.stopping.CopyFrom(build_stopping_params(options))
    return request


def _set_flag(request: generation_pb2.GenerateRequest, name: str, value: Any) -> None:
    """Set the optional bool field ``name``; ValueError naming it unless ``value`` is True or False."""
    if not isinstance(value, bool):
        raise ValueError(f"{name}: must be True or False, got {value!r}")
    setattr(request, name, value)


def build_tokenize_request(
    prompt: str | None = None,
    *,
    messages: Sequence[Message] | None = None,
    model: str | None = None,
    tools: Sequence[Mapping[str, Any]] | str | None = None,
    add_generation_prompt: bool | None = None,
    continue_final_message: bool | None = None,
    chat_template_kwargs: Mapping[str, Any] | str | None = None,
    documents: Sequence[Mapping[str, Any]] | str | None = None,
    chat_template: str | None = None,
) -> generation_pb2.TokenizeRequest:
    """A TokenizeRequest for exactly one of ``prompt`` (raw text) or ``messages`` (chat; ``tools`` given to the
    template and the chat template controls, as GenerateOptions' options of those names).

    Raises:
        ValueError: not exactly one of prompt/messages, an empty message list, a malformed message, or tools or a
            chat template control without messages.
    """
    request = generation_pb2.TokenizeRequest(model=model or "")
    if (prompt is None) == (messages is None):
        raise ValueError("pass exactly one of prompt, messages")
    template = {"add_generation_prompt": add_generation_prompt, "continue_final_message": continue_final_message,
                "chat_template_kwargs": chat_template_kwargs, "documents": documents, "chat_template": chat_template}
    if prompt is not None:
        if tools is not None:
            raise ValueError("tools: only a chat prompt (messages) is given tools")
        _set_template_options(None, template)
        request.text = _prompt_text(prompt)
    else:
        assert messages is not None  # exactly one of the two is given
        request.chat.CopyFrom(_chat_prompt(messages))
        if tools is not None:
            request.chat.tools_json = _json_list(tools, "tools")
        _set_template_options(request.chat, template)
    return request


def _set_template_options(chat: generation_pb2.ChatPrompt | None, options: Mapping[str, Any]) -> None:
    """add_generation_prompt, continue_final_message, chat_template_kwargs, documents and chat_template (those given
    and not None) on ``chat``; ValueError naming one given without a chat prompt (``chat`` None) or of the wrong
    type."""
    for name in ("add_generation_prompt", "continue_final_message", "chat_template_kwargs", "documents",
                 "chat_template"):
        value = options.get(name)
        if value is None:
            continue
        if chat is None:
            raise ValueError(f"{name}: only a chat prompt (messages) is rendered with the chat template")
        if name == "chat_template_kwargs":
            chat.template_kwargs_json = _json_object(value, name)
        elif name == "documents":
            chat.documents_json = _json_list(value, name)
        elif name == "chat_template":
            if not isinstance(value, str):
                raise ValueError(f"{name}: must be a string (a Jinja template), got {type(value).__name__}")
            chat.chat_template = value
        elif isinstance(value, bool):
            setattr(chat, name, value)
        else:
            raise ValueError(f"{name}: must be True or False, got {value!r}")


def build_detokenize_request(
    token_ids: Sequence[int], *, skip_special_tokens: bool | None = None, model: str | None = None
) -> generation_pb2.DetokenizeRequest:
    """A DetokenizeRequest; ValueError when ``token_ids`` are not int32 values."""
    request = generation_pb2.DetokenizeRequest(model=model or "")
    _extend_field(request.token_ids, "token_ids", token_ids)
    if skip_special_tokens is not None:
        request.skip_special_tokens = skip_special_tokens
    return request


def build_sampling_params(options: Mapping[str, Any]) -> sampling_pb2.SamplingParams:
    """SamplingParams with only the options that are given and not None.

    Raises ValueError naming the option for a value the message cannot carry (a negative seed, a float
    where an integer goes, NaN or infinity, two structured output formats, bad_words as one string rather than a
    list); the server checks the ranges."""
    params = sampling_pb2.SamplingParams()
    for name in _SAMPLING_FIELDS:
        value = options.get(name)
        if value is None:
            continue
        if name == "seed" and isinstance(value, int) and not 0 <= value < 2**64:
            raise ValueError(f"seed: must be in [0, 2**64), got {value}")
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"{name}: must be a finite number, got {value}")
        _set_field(params, name, value)
    if options.get("logit_bias") is not None:
        _set_logit_bias(params, options["logit_bias"])
    if options.get("allowed_token_ids") is not None:
        _extend_field(params.allowed_token_ids, "allowed_token_ids", options["allowed_token_ids"])
    bad_words = options.get("bad_words")
    if bad_words is not None:
        if isinstance(bad_words, str) or not isinstance(bad_words, Sequence):  # a string: one word per character
            raise ValueError(f"bad_words: must be a list of strings, got {type(bad_words).__name__} {bad_words!r}")
        _extend_field(params.bad_words, "bad_words", bad_words)
    _set_structured_output(params.structured_output, options)
    return params


def _set_structured_output(target: sampling_pb2.StructuredOutput, options: Mapping[str, Any]) -> None:
    """The one structured output option given (json_object=False counts as not given), if any."""
    if options.get("json_object") is not None and not isinstance(options["json_object"], bool):
        raise ValueError(f"json_object: must be True or False, got {options['json_object']!r}")
    given = [name for name in STRUCTURED_OUTPUT_OPTIONS if options.get(name) is not None and options[name] is not False]
    if len(given) > 1:
        raise ValueError(f"{given[1]}: only one structured output format may be given, got {given[0]} and {given[1]}")
    if not given:
        return
    name = given[0]
    value = options[name]
    if name == "json_object":
        target.json_object = True
    elif name == "json_schema":
        target.json_schema = _schema_text(value)
    elif name == "choice":
        if isinstance(value, str) or not isinstance(value, Sequence):
            raise ValueError(f"choice: must be a list of strings, got {type(value).__name__} {value!r}")
        target.choice.SetInParent()  # an empty list is still a (refused) format, not free text
        _extend_field(target.choice.choices, "choice", value)
    else:
        if not isinstance(value, str):
            raise ValueError(f"{name}: must be a string, got {type(value).__name__} {value!r}")
        setattr(target, name, value)


def _schema_text(schema: Any) -> str:
    if isinstance(schema, str):
        return schema
    if not isinstance(schema, Mapping):
        raise ValueError(f"json_schema: must be a dict or JSON text, got {type(schema).__name__} {schema!r}")
    try:
        return json.dumps(dict(schema), allow_nan=False)
    except (TypeError, ValueError) as error:
        raise ValueError(f"json_schema: cannot be written as JSON ({error})") from None


def _set_logit_bias(params: sampling_pb2.SamplingParams, bias: Any) -> None:
    if not isinstance(bias, Mapping):
        raise ValueError(f"logit_bias: must be a mapping of token id to bias, got {bias!r}")
    for token_id, value in bias.items():
        if isinstance(token_id, bool) or not isinstance(token_id, int):
            raise ValueError(f"logit_bias: keys must be integer token ids, got {token_id!r}")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ValueError(f"logit_bias[{token_id}]: must be a finite number, got {value!r}")
        try:
            params.logit_bias[token_id] = value
        except (TypeError, ValueError) as error:
            raise ValueError(f"logit_bias: {token_id!r} is not a valid token id ({error})") from None


def build_stopping_params(options: Mapping[str, Any]) -> sampling_pb2.StoppingParams:
    """StoppingParams with only the options that are given and not None (ValueError naming a bad one)."""
    params = sampling_pb2.StoppingParams()
    for name in _STOPPING_SCALAR_FIELDS:
        if options.get(name) is not None:
            _set_field(params, name, options[name])
    stop = options.get("stop")
    if stop is not None:
        _extend_field(params.stop, "stop", [stop] if isinstance(stop, str) else stop)
    if options.get("stop_token_ids") is not None:
        _extend_field(params.stop_token_ids, "stop_token_ids", options["stop_token_ids"])
    return params


def _set_field(message: Any, name: str, value: Any) -> None:
    try:
        setattr(message, name, value)
    except (TypeError, ValueError) as error:  # protobuf says "Value out of range: -5" without the field
        raise ValueError(f"{name}: {value!r} is not a valid value ({error})") from None


def _extend_field(field: Any, name: str, values: Any) -> None:
    try:
        field.extend(values)
    except (TypeError, ValueError) as error:
        raise ValueError(f"{name}: {values!r} is not a valid value ({error})") from None


def call_metadata(api_key: str | None = None) -> tuple[tuple[str, str], ...]:
    """Metadata sent with every call: the caller's W3C trace context, when a span is current, and the
    API key as ``authorization: Bearer <key>`` when there is one."""
    return trace_metadata() + auth_metadata(api_key)


def _check_option_names(options: Mapping[str, Any]) -> None:
    unknown = sorted(set(options) - set(GenerateOptions.__annotations__))
    if unknown:
        raise TypeError(f"unknown generation option(s): {', '.join(unknown)}")


def _set_prompt(
    request: generation_pb2.GenerateRequest,
    prompt: str | None,
    messages: Sequence[Message] | None,
    token_ids: Sequence[int] | None,
) -> None:
    forms = {"prompt": prompt, "messages": messages, "token_ids": token_ids}
    given = [name for name, value in forms.items() if value is not None]
    if len(given) != 1:
        found = ", ".join(given) if given else "none"
        raise ValueError(f"pass exactly one of prompt, messages, token_ids (got: {found})")
    if prompt is not None:
        request.text = _prompt_text(prompt)
    elif messages is not None:
        request.chat.CopyFrom(_chat_prompt(messages))
    else:
        assert token_ids is not None  # exactly one of the three forms is given
        if len(token_ids) == 0:
            raise ValueError("token_ids must contain at least one token id")
        _extend_field(request.token_ids.ids, "token_ids", token_ids)


def _prompt_text(prompt: object) -> str:
    if not isinstance(prompt, str):
        raise ValueError(f"prompt: must be a string, got {type(prompt).__name__} {prompt!r}")
    return prompt


def _chat_prompt(messages: Sequence[Message]) -> generation_pb2.ChatPrompt:
    if len(messages) == 0:
        raise ValueError("messages must contain at least one message")
    return generation_pb2.ChatPrompt(messages=[_chat_message(m, i) for i, m in enumerate(messages)])


def _chat_message(message: Message, index: int) -> generation_pb2.ChatMessage:
    if isinstance(message, Mapping):
        role, content = message.get("role"), message.get("content")
        tool_calls = message.get("tool_calls")
        tool_calls_json = "" if tool_calls is None else _json_list(tool_calls, f"messages[{index}].tool_calls")
        tool_call_id = message.get("tool_call_id")
        name = message.get("name")
        reasoning = message.get("reasoning_content")
    else:
        role, content = getattr(message, "role", None), getattr(message, "content", None)
        tool_calls_json = getattr(message, "tool_calls_json", "")
        tool_call_id = getattr(message, "tool_call_id", None)
        name = getattr(message, "name", None)
        reasoning = getattr(message, "reasoning_content", None)
    if content is None and tool_calls_json:
        content = ""  # an assistant message that only calls tools (OpenAI's content: null)
    if not isinstance(role, str) or not isinstance(content, str):
        raise ValueError(f"messages[{index}] needs string 'role' and 'content', got {message!r}")
    for key, value in (("tool_call_id", tool_call_id), ("name", name), ("reasoning_content", reasoning)):
        if value is not None and not isinstance(value, str):
            raise ValueError(f"messages[{index}].{key}: must be a string, got {value!r}")
    if not isinstance(tool_calls_json, str):
        raise ValueError(f"messages[{index}].tool_calls_json: must be a string, got {tool_calls_json!r}")
    return generation_pb2.ChatMessage(role=role, content=content, tool_calls_json=tool_calls_json,
                                      tool_call_id=tool_call_id or "", name=name or "",
                                      reasoning_content=reasoning or "")


def _json_list(value: Any, field: str) -> str:
    """A list of JSON objects (dicts) as JSON text; JSON text is passed as it is (the server checks it)."""
    if isinstance(value, str):
        return value
    if not isinstance(value, Sequence) or not all(isinstance(item, Mapping) for item in value):
        raise ValueError(f"{field}: must be a list of dicts or its JSON text, got {type(value).__name__} {value!r}")
    return _dumps([dict(item) for item in value], field)


def _json_object(value: Any, field: str) -> str:
    """A dict as JSON text; JSON text is passed as it is (the server checks it)."""
    if isinstance(value, str):
        return value
    if not isinstance(value, Mapping):
        raise ValueError(f"{field}: must be a dict or its JSON text, got {type(value).__name__} {value!r}")
    return _dumps(dict(value), field)


def _dumps(value: Any, field: str) -> str:
    """``value`` as JSON text; ValueError naming ``field`` when it cannot be written (a set, NaN, ...)."""
    try:
        return json.dumps(value, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as error:
        raise ValueError(f"{field}: cannot be written as JSON ({error})") from None


def check_timeout(timeout: float | None, field: str = "timeout") -> float | None:
    """Validate a deadline in seconds (None: no deadline); returns it unchanged."""
    if timeout is not None and not timeout > 0:
        raise ValueError(f"{field} must be a positive number of seconds or None, got {timeout!r}")
    return timeout


def resolve_timeout(call_timeout: float | None, default_timeout: float | None) -> float | None:
    """The deadline of one call: its own timeout if given, else the client's default."""
    if call_timeout is not None:
        return check_timeout(call_timeout)
    return default_timeout
