"""Checks a GenerateRequest and turns it into a scheduler Request, or says which field is wrong."""

from __future__ import annotations

import math
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from scheduler_svc.generation_defaults import GenerationDefaults
from scheduler_svc.lora_adapters import ServedAdapters
from scheduler_svc.prediction import prediction_token_ids
from scheduler_svc.reasoning.request_split import splitting_parser
from scheduler_svc.reasoning.thinking_bounds import ThinkingBounds
from scheduler_svc.reasoning.thinking_budget import check_thinking_budget
from scheduler_svc.request import Request, StopParams
from scheduler_svc.request_errors import InvalidRequestError as InvalidRequestError  # re-exported for callers
from scheduler_svc.token_restrictions import bad_word_token_ids, check_allowed_token_ids
from scheduler_svc.tokenizer import ContinuationError, TemplateSourceError, Tokenizer, template_names
from scheduler_svc.tool_calls.request_parsing import tool_call_parsing
from stepahead_common.json_text import parse_json_text
from stepahead_common.structured_output import StructuredOutputError, grammar_error, grammar_of
from stepahead_proto import generation_pb2, sampling_pb2

MAX_LOGPROBS = 20
MAX_STOP_STRINGS = 64
MAX_STOP_STRING_CHARS = 1024
MAX_STOP_TOKEN_IDS = 1024
MAX_LOGIT_BIAS_ENTRIES = 1024
MAX_ABS_LOGIT_BIAS = 100.0
MAX_REQUEST_ID_CHARS = 256
MAX_PROMPT_CHARS_PER_TOKEN = 64
"""A text or chat prompt longer than this many characters per token of max_model_len is refused before it is
tokenized: it cannot fit (tokens of real text average 3-5 characters), and tokenizing it costs CPU."""
CHAT_ROLES = ("system", "user", "assistant", "tool")
CHAT_MESSAGE_CHARS = 16
"""What each chat message counts towards MAX_PROMPT_CHARS_PER_TOKEN besides its role and content: the template's
own text around it (ChatML's is 26 characters). Without it, 130k empty messages in a 1 MB request passed the
check and took 2.5 s to render and tokenize before being refused as too long."""
MAX_TEMPLATE_KWARGS_CHARS = 65_536
"""Longest ChatPrompt.template_kwargs_json: template switches and short texts (Qwen3's enable_thinking, a reasoning
effort), not a second prompt. Like tools_json, the text also counts toward MAX_PROMPT_CHARS_PER_TOKEN."""
MAX_CHAT_TEMPLATE_CHARS = 65_536
"""Longest ChatPrompt.chat_template (models' own templates are at most a few thousand characters)."""
PromptRequest = generation_pb2.GenerateRequest | generation_pb2.TokenizeRequest
"""A message with GenerateRequest's ``prompt`` oneof (TokenizeRequest has its text and chat forms)."""


@dataclass(frozen=True)
class ModelLimits:
    """What a request is checked against."""

    model_name: str
    max_model_len: int
    vocab_size: int
    eos_token_ids: frozenset[int]
    default_max_tokens: int
    structured_output: bool = True
    """Whether the executors can apply SamplingParams.structured_output."""
    priority_scheduling: bool = False
    """Whether the scheduler orders requests by GenerateRequest.priority (else only 0 is accepted)."""
    request_chat_templates: bool = False
    """Whether ChatPrompt.chat_template is accepted (--trust-request-chat-template)."""
    generation_defaults: GenerationDefaults = field(default_factory=GenerationDefaults)
    """Sampling values for the fields a request leaves unset (the model's generation_config.json)."""
    adapters: ServedAdapters = field(default_factory=ServedAdapters)
    """LoRA adapters the executors serve: a request naming one as its model runs with it."""
    reasoning_parser: str | None = None
    """The server's --reasoning-parser: outputs it splits into thinking and answer (GenerateRequest.split_reasoning);
    None: no output is split."""
    thinking_bounds: ThinkingBounds | None = None
    """The parser's thinking markers as the model's tokens: a structured output format of a split request waits for
    them and constrains the answer alone; None: formats constrain the whole output (no split)."""
    tool_call_parser: str | None = None
    """The server's --tool-call-parser: chat outputs with tools are parsed for calls (GenerateRequest.parse_tool_calls);
    None: no output is."""
    chat_template_defaults: Mapping[str, Any] = field(default_factory=dict)
    """Chat template variables a chat prompt gets unless its template_kwargs_json sets them
    (--default-chat-template-kwargs)."""

    @property
    def lora_adapters(self) -> tuple[str, ...]:
        """The served LoRA adapters' names, now."""
        return self.adapters.names


def _check(condition: bool, field: str, message: str) -> None:
    if not condition:
        raise InvalidRequestError(field, message)


def build_request(pb: generation_pb2.GenerateRequest, tokenizer: Tokenizer, limits: ModelLimits,
                  prompt_ids: list[int] | None = None) -> Request:
    """Validate every field of ``pb`` and resolve defaults. Raises InvalidRequestError.

    ``prompt_ids``: the ids of ``pb``'s prompt when a request with the same prompt was built before (HTTP's ``n``
    samples of one prompt): not tokenized again."""
    lora_adapter, adapter_cache_key = served_model(pb.model, limits)
    _check(
        len(pb.request_id) <= MAX_REQUEST_ID_CHARS,
        "request_id",
        f"{len(pb.request_id)} characters; at most {MAX_REQUEST_ID_CHARS}",
    )
    truncate = _truncation(pb, limits)
    if prompt_ids is None:
        prompt_ids = prompt_token_ids(pb, tokenizer, limits, truncating=truncate is not None)
    if truncate is not None:
        prompt_ids = prompt_ids[-truncate:]
    _check(
        len(prompt_ids) < limits.max_model_len,
        "prompt",
        f"{len(prompt_ids)} tokens leave no room to generate within the model's limit of "
        f"{limits.max_model_len} tokens",
    )
    _check(pb.priority == 0 or limits.priority_scheduling, "priority",
           f"{pb.priority} needs the priority scheduling policy; this server schedules first come, first served "
           "(start it with --scheduling-policy priority)")
    _check_sampling(pb.sampling, limits.vocab_size)
    if pb.sampling.HasField("structured_output"):
        check_structured_output(pb.sampling.structured_output, tokenizer, limits)
    check_allowed_token_ids(pb.sampling, limits.vocab_size)
    bad_words = bad_word_token_ids(pb.sampling, tokenizer)
    reasoning_parser = splitting_parser(pb, limits.reasoning_parser, limits.thinking_bounds)
    calls = tool_call_parsing(pb, limits.tool_call_parser, split=reasoning_parser is not None)
    check_thinking_budget(pb.sampling, reasoning_parser, limits.thinking_bounds, bad_words)
    phased = pb.sampling.HasField("structured_output") or pb.sampling.HasField("thinking_token_budget")
    # The parsers read markers that may be special tokens (<think>, <tool_call>): kept unless the request says
    stop_params = _stop_params(pb, len(prompt_ids), limits,
                               keep_special_tokens=reasoning_parser is not None or calls is not None)
    return Request(
        request_id=pb.request_id or uuid.uuid4().hex,
        prompt_token_ids=prompt_ids,
        sampling=limits.generation_defaults.apply(pb.sampling),
        stop_params=stop_params,
        spec_enabled=not pb.disable_speculation,
        priority=pb.priority,
        bad_words=bad_words,
        lora_adapter=lora_adapter,
        adapter_cache_key=adapter_cache_key,
        reasoning_parser=reasoning_parser,
        format_after_thinking=limits.thinking_bounds if reasoning_parser and phased else None,
        tool_call_parsing=calls,
        prediction_token_ids=prediction_token_ids(pb, tokenizer, limits.max_model_len,
                                                  MAX_PROMPT_CHARS_PER_TOKEN * limits.max_model_len),
    )


def _truncation(pb: generation_pb2.GenerateRequest, limits: ModelLimits) -> int | None:
    """How many prompt tokens truncate_prompt_tokens keeps (None: no truncation)."""
    if not pb.HasField("truncate_prompt_tokens"):
        return None
    keep = pb.truncate_prompt_tokens
    _check(keep == -1 or keep >= 1, "truncate_prompt_tokens", f"must be -1 (the longest prompt the model's context "
           f"allows) or >= 1, got {keep}")
    return limits.max_model_len - 1 if keep == -1 else keep


def check_model_name(model: str, limits: ModelLimits) -> str:
    """The LoRA adapter ``model`` names ("" for the base model: empty or the served model's name);
    InvalidRequestError for any other name."""
    return served_model(model, limits)[0]


def served_model(model: str, limits: ModelLimits) -> tuple[str, str]:
    """The LoRA adapter ``model`` names ("" for the base model: empty or the served model's name) and its prefix-cache
    key, read together (an adapter unloaded meanwhile is unknown, never half-known); InvalidRequestError for any
    other name."""
    if model in ("", limits.model_name):
        return "", ""
    key = limits.adapters.cache_key(model)
    if key is not None:
        return model, key
    adapters = f" and LoRA adapters {list(limits.lora_adapters)}" if limits.lora_adapters else ""
    raise InvalidRequestError("model", f"unknown model {model!r}; served: {limits.model_name!r}{adapters}")


def prompt_token_ids(pb: PromptRequest, tokenizer: Tokenizer, limits: ModelLimits,
                     truncating: bool = False) -> list[int]:
    """The prompt's token ids, as the model reads them (chat template applied); InvalidRequestError naming the
    field when the prompt is missing, empty, too long to tokenize, or out of the vocabulary. ``truncating``: only
    its last tokens will be kept, so given ids may outnumber the model's limit (up to the character limit's count)."""
    kind = pb.WhichOneof("prompt")
    forms = "text, chat or token_ids" if isinstance(pb, generation_pb2.GenerateRequest) else "text or chat"
    _check(kind is not None, "prompt", f"one of {forms} is required")
    if kind == "token_ids" and isinstance(pb, generation_pb2.GenerateRequest):
        ids = _given_token_ids(pb.token_ids, limits, truncating)
    elif kind == "text":
        _check_prompt_chars("text", len(pb.text), limits.max_model_len)
        _check(pb.text != "", "text", "the prompt is empty")
        ids = tokenizer.encode(pb.text)
    else:
        ids = _chat_token_ids(pb.chat, tokenizer, limits)
    _check(bool(ids), "prompt", "the prompt tokenizes to no tokens")
    return ids


def _given_token_ids(prompt: generation_pb2.TokenIdsPrompt, limits: ModelLimits, truncating: bool) -> list[int]:
    count, max_model_len = len(prompt.ids), limits.max_model_len
    if truncating:
        limit = MAX_PROMPT_CHARS_PER_TOKEN * max_model_len
        _check(count <= limit, "token_ids.ids", f"{count} ids; at most {limit} even when truncated")
    else:
        _check(count < max_model_len, "prompt",
               f"{count} tokens leave no room to generate within the model's limit of {max_model_len} tokens")
    ids = list(prompt.ids)
    _check(bool(ids), "token_ids.ids", "the prompt is empty")
    for index, token_id in enumerate(ids):
        _check(
            0 <= token_id < limits.vocab_size,
            f"token_ids.ids[{index}]",
            f"{token_id} is outside the vocabulary [0, {limits.vocab_size})",
        )
    return ids


def _chat_token_ids(chat: generation_pb2.ChatPrompt, tokenizer: Tokenizer, limits: ModelLimits) -> list[int]:
    kwargs_chars = len(chat.template_kwargs_json)
    _check(kwargs_chars <= MAX_TEMPLATE_KWARGS_CHARS, "chat.template_kwargs_json",
           f"{kwargs_chars} characters; at most {MAX_TEMPLATE_KWARGS_CHARS}")
    _check_request_chat_template(chat.chat_template, limits)
    _check_prompt_chars("chat", chat_prompt_chars(chat), limits.max_model_len)
    _check(bool(chat.messages), "chat.messages", "at least one message is required")
    messages = [_template_message(message, index) for index, message in enumerate(chat.messages)]
    tools = _json_objects(chat.tools_json, "chat.tools_json") or None
    documents = _json_objects(chat.documents_json, "chat.documents_json") or None
    add_generation_prompt = _add_generation_prompt(chat)
    template_kwargs = {**limits.chat_template_defaults, **_template_kwargs(chat.template_kwargs_json)}
    try:
        return tokenizer.apply_chat_template(messages, tools, add_generation_prompt=add_generation_prompt,
                                             continue_final_message=chat.continue_final_message,
                                             template_kwargs=template_kwargs, documents=documents,
                                             template_source=chat.chat_template or None)
    except ContinuationError as error:
        raise InvalidRequestError("chat.continue_final_message", str(error)) from error
    except TemplateSourceError as error:
        raise InvalidRequestError("chat.chat_template", str(error)) from error
    except ValueError as error:
        raise InvalidRequestError("chat", f"the chat template failed: {error}") from error


def _check_request_chat_template(template: str, limits: ModelLimits) -> None:
    if not template:
        return
    _check(limits.request_chat_templates, "chat.chat_template", "this server renders prompts only with the model's "
           "own chat template (start it with --trust-request-chat-template to accept a request's)")
    _check(len(template) <= MAX_CHAT_TEMPLATE_CHARS, "chat.chat_template",
           f"{len(template)} characters; at most {MAX_CHAT_TEMPLATE_CHARS}")


def _add_generation_prompt(chat: generation_pb2.ChatPrompt) -> bool:
    """The template's add_generation_prompt (unset: true, false when continuing the last message); with
    continue_final_message, that last message must be the assistant's and add_generation_prompt not true."""
    if not chat.continue_final_message:
        return chat.add_generation_prompt if chat.HasField("add_generation_prompt") else True
    _check(not chat.add_generation_prompt, "chat.add_generation_prompt",
           "must be false with continue_final_message (the last message is continued: no new one is started)")
    last = len(chat.messages) - 1
    role = chat.messages[last].role
    _check(role == "assistant", "chat.continue_final_message",
           f"the last message (chat.messages[{last}]) must be the assistant's to be continued, not one of role "
           f"{role!r}")
    return False


def _template_kwargs(text: str) -> dict[str, Any]:
    """ChatPrompt.template_kwargs_json as the template's extra variables ("" is none), none of them a name the
    server sets itself."""
    field = "chat.template_kwargs_json"
    if not text:
        return {}
    try:
        value = parse_json_text(text)
    except ValueError as error:
        raise InvalidRequestError(field, str(error)) from error
    _check(isinstance(value, dict), field, f"must be a JSON object, got {_json_type(value)}")
    for name in value:
        _check(name not in template_names(), f"{field}.{name}",
               "the server sets this template variable itself (set the request's own field, where there is one)")
    return dict(value)


def _template_message(message: generation_pb2.ChatMessage, index: int) -> dict[str, Any]:
    """One message as the chat template reads it: role and content, an assistant's ``tool_calls`` (left out when
    it has none), a tool's ``tool_call_id``, the author's ``name`` and an assistant's ``reasoning_content`` (left out
    when empty)."""
    field = f"chat.messages[{index}]"
    _check(message.role in CHAT_ROLES, f"{field}.role", f"{message.role!r} is not one of {', '.join(CHAT_ROLES)}")
    rendered: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.tool_calls_json:
        _check(message.role == "assistant", f"{field}.tool_calls_json",
               f"only an assistant message has tool calls, not one of role {message.role!r}")
        calls = _json_objects(message.tool_calls_json, f"{field}.tool_calls_json")
        if calls:
            rendered["tool_calls"] = [_template_tool_call(call) for call in calls]
    if message.tool_call_id:
        _check(message.role == "tool", f"{field}.tool_call_id",
               f"only a tool message answers a tool call, not one of role {message.role!r}")
        rendered["tool_call_id"] = message.tool_call_id
    if message.name:
        rendered["name"] = message.name
    if message.reasoning_content:
        _check(message.role == "assistant", f"{field}.reasoning_content",
               f"only an assistant message has reasoning, not one of role {message.role!r}")
        rendered["reasoning_content"] = message.reasoning_content
    return rendered


def _json_objects(text: str, field: str) -> list[dict[str, Any]]:
    """A JSON array of objects given as text ("" is an empty one)."""
    if not text:
        return []
    try:
        value = parse_json_text(text)
    except ValueError as error:
        raise InvalidRequestError(field, str(error)) from error
    _check(isinstance(value, list), field, f"must be a JSON array, got {_json_type(value)}")
    for index, item in enumerate(value):
        _check(isinstance(item, dict), field, f"item {index} must be a JSON object, got {_json_type(item)}")
    return list(value)


def _json_type(value: object) -> str:
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null"}
    return names.get(type(value), "a number")


def _template_tool_call(call: dict[str, Any]) -> dict[str, Any]:
    """A tool call as HF chat templates expect it (as vLLM gives it to them): ``function.arguments`` holding a JSON
    object's text becomes that object, an empty or absent one {}; anything else is left as it is."""
    function = call.get("function")
    if not isinstance(function, dict):
        return call
    arguments = function.get("arguments")
    if arguments is None or arguments == "":
        return {**call, "function": {**function, "arguments": {}}}
    if isinstance(arguments, str):
        try:
            parsed = parse_json_text(arguments)
        except ValueError:
            return call
        if isinstance(parsed, dict):
            return {**call, "function": {**function, "arguments": parsed}}
    return call


def chat_prompt_chars(chat: generation_pb2.ChatPrompt) -> int:
    """The characters a chat prompt counts as: its roles, contents, tool calls, tool call ids, names and reasoning,
    CHAT_MESSAGE_CHARS per message, its tools, documents, template kwargs and template (which may render any)."""
    return len(chat.tools_json) + len(chat.documents_json) + len(chat.template_kwargs_json) + len(
        chat.chat_template) + sum(
        len(m.content) + len(m.role) + len(m.tool_calls_json) + len(m.tool_call_id) + len(m.name)
        + len(m.reasoning_content) + CHAT_MESSAGE_CHARS
        for m in chat.messages
    )


def _check_prompt_chars(field: str, chars: int, max_model_len: int) -> None:
    """Refuse a prompt that cannot fit before tokenizing it."""
    limit = MAX_PROMPT_CHARS_PER_TOKEN * max_model_len
    _check(chars <= limit, field,
           f"{chars} characters cannot fit the model's limit of {max_model_len} tokens (at most {limit} characters)")


def _check_sampling(p: sampling_pb2.SamplingParams, vocab_size: int) -> None:
    def finite(name: str) -> None:
        _check(math.isfinite(getattr(p, name)), f"sampling.{name}", "must be a finite number")

    for name in ("temperature", "top_p", "min_p", "repetition_penalty", "presence_penalty", "frequency_penalty"):
        finite(name)
    if p.HasField("temperature"):
        _check(p.temperature >= 0, "sampling.temperature", f"must be >= 0, got {p.temperature}")
    if p.HasField("top_p"):
        _check(0 < p.top_p <= 1, "sampling.top_p", f"must be in (0, 1], got {p.top_p}")
    if p.HasField("top_k"):
        _check(p.top_k == -1 or p.top_k >= 1, "sampling.top_k", f"must be -1 (disabled) or >= 1, got {p.top_k}")
    _check(0 <= p.min_p <= 1, "sampling.min_p", f"must be in [0, 1], got {p.min_p}")
    if p.HasField("repetition_penalty"):
        _check(p.repetition_penalty > 0, "sampling.repetition_penalty", f"must be > 0, got {p.repetition_penalty}")
    for name in ("presence_penalty", "frequency_penalty"):
        value = getattr(p, name)
        _check(-2 <= value <= 2, f"sampling.{name}", f"must be in [-2, 2], got {value}")
    if p.HasField("logprobs"):
        _check(
            0 <= p.logprobs <= MAX_LOGPROBS,
            "sampling.logprobs",
            f"must be in [0, {MAX_LOGPROBS}], got {p.logprobs}",
        )
    if p.HasField("prompt_logprobs"):
        _check(0 <= p.prompt_logprobs <= MAX_LOGPROBS, "sampling.prompt_logprobs",
               f"must be in [0, {MAX_LOGPROBS}], got {p.prompt_logprobs}")
    _check_logit_bias(p, vocab_size)


def _check_logit_bias(p: sampling_pb2.SamplingParams, vocab_size: int) -> None:
    count = len(p.logit_bias)
    _check(count <= MAX_LOGIT_BIAS_ENTRIES, "sampling.logit_bias",
           f"{count} entries; at most {MAX_LOGIT_BIAS_ENTRIES}")
    for token_id, bias in sorted(p.logit_bias.items()):
        field = f"sampling.logit_bias[{token_id}]"
        _check(0 <= token_id < vocab_size, field, f"token id {token_id} is outside the vocabulary [0, {vocab_size})")
        _check(math.isfinite(bias) and abs(bias) <= MAX_ABS_LOGIT_BIAS, field,
               f"the bias of token {token_id} must be in [-{MAX_ABS_LOGIT_BIAS:g}, {MAX_ABS_LOGIT_BIAS:g}], got {bias}")


def check_structured_output(format_: sampling_pb2.StructuredOutput, tokenizer: Tokenizer,
                            limits: ModelLimits) -> None:
    """The format is well formed and compiles against the model's tokenizer (as the executor will compile it);
    InvalidRequestError naming the part (``sampling.structured_output.json_schema``) otherwise."""
    field = "sampling.structured_output"
    _check(limits.structured_output, field,
           "this server's executor cannot apply structured output (it has no tokenizer.json beside its model)")
    try:
        grammar = grammar_of(format_)
    except StructuredOutputError as error:
        raise InvalidRequestError(error.field, error.reason) from error
    llg_tokenizer = tokenizer.grammar_tokenizer(limits.vocab_size, sorted(limits.eos_token_ids))
    problem = grammar_error(grammar, llg_tokenizer)
    _check(problem is None, f"{field}.{format_.WhichOneof('kind')}", f"invalid: {(problem or '').strip()}")


def _stop_params(pb: generation_pb2.GenerateRequest, prompt_len: int, limits: ModelLimits,
                 keep_special_tokens: bool = False) -> StopParams:
    """``keep_special_tokens``: the default of skip_special_tokens is false (a reasoning or tool call parser reads
    markers that may be special tokens)."""
    s = pb.stopping
    room = limits.max_model_len - prompt_len
    if s.HasField("max_tokens"):
        _check(s.max_tokens >= 1, "stopping.max_tokens", f"must be >= 1, got {s.max_tokens}")
        _check(
            s.max_tokens <= room,
            "stopping.max_tokens",
            f"{s.max_tokens} + {prompt_len} prompt tokens exceed the model's limit of {limits.max_model_len}",
        )
        max_tokens = s.max_tokens
    else:
        max_tokens = min(limits.default_max_tokens, room)
    _check(0 <= s.min_tokens <= max_tokens, "stopping.min_tokens", f"must be in [0, max_tokens={max_tokens}]")
    _check(len(s.stop) <= MAX_STOP_STRINGS, "stopping.stop", f"{len(s.stop)} stop strings; at most {MAX_STOP_STRINGS}")
    for index, stop in enumerate(s.stop):
        _check(stop != "", f"stopping.stop[{index}]", "a stop string must not be empty")
        _check(len(stop) <= MAX_STOP_STRING_CHARS, f"stopping.stop[{index}]",
               f"{len(stop)} characters; at most {MAX_STOP_STRING_CHARS}")
    _check(len(s.stop_token_ids) <= MAX_STOP_TOKEN_IDS, "stopping.stop_token_ids",
           f"{len(s.stop_token_ids)} ids; at most {MAX_STOP_TOKEN_IDS}")
    for index, token_id in enumerate(s.stop_token_ids):
        _check(
            0 <= token_id < limits.vocab_size,
            f"stopping.stop_token_ids[{index}]",
            f"{token_id} is outside the vocabulary [0, {limits.vocab_size})",
        )
    return StopParams(
        max_tokens=max_tokens,
        min_tokens=s.min_tokens,
        stop=tuple(s.stop),
        stop_token_ids=frozenset(s.stop_token_ids),
        eos_token_ids=limits.eos_token_ids,
        ignore_eos=s.ignore_eos,
        include_stop_str_in_output=s.include_stop_str_in_output,
        skip_special_tokens=pb.skip_special_tokens if pb.HasField("skip_special_tokens") else not keep_special_tokens,
    )
