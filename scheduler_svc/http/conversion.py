"""OpenAI request bodies -> GenerateRequest protos, one per choice; validation errors -> OpenAI parameters.

Every range and prompt check is the gRPC API's own (validation.build_request): this module only
maps names (``max_completion_tokens`` -> ``stopping.max_tokens``, ``messages`` -> ``chat``) and
refuses what only exists over HTTP (``n``, ``top_logprobs`` without ``logprobs``, ``logit_bias`` keys that are
not token ids, two structured output parameters, unsupported OpenAI parameters). The structured output parameters
(``response_format``, ``guided_json``, ``guided_regex``, ``guided_choice``, ``guided_grammar``) and a tool_choice
that forces calls (a named function or "required": tools.py) all become ``sampling.structured_output``, at most
one of them (tool_choice "auto" leaves the output free); the gRPC checks of the
format (a bad schema, regex or grammar) are renamed back to the parameter the request set (a tool's
``tools[i].function.parameters``). ``tools`` and messages' ``tool_calls`` / ``tool_call_id`` become the ChatPrompt's
``tools_json`` and its messages' ``tool_calls_json`` / ``tool_call_id``; vLLM's ``add_generation_prompt``,
``continue_final_message``, ``chat_template_kwargs``, ``documents`` and ``chat_template`` become the ChatPrompt's
fields of those names (``template_kwargs_json`` and ``documents_json``, the JSON texts; ``chat_template`` as given,
null or "" unset), and their errors are renamed back (``chat.chat_template`` is ``chat_template``). ``n`` samples
of one prompt are ``n`` engine requests; with a ``seed``, sample ``i`` uses ``seed + i``, so each sample is
reproducible on its own.

vLLM's token restrictions and prompt truncation: ``allowed_token_ids`` and ``bad_words`` are ``sampling``'s fields of
those names (null or an empty list: none; their errors keep the list position, ``bad_words[2]``), refused here with a
structured output parameter or a tool_choice that forces calls (the gRPC check would name ``structured_output``, no
parameter of this API); ``truncate_prompt_tokens`` is the GenerateRequest's (the engine's prompt ids, which ``echo``
and the prompt logprobs use, are the ones kept).

Response controls only the HTTP front applies (GenerationPlan): vLLM's ``stream_options.continuous_usage_stats``,
``return_tokens_as_token_ids`` and chat's ``echo`` (the last message's content, as the template read it, when it is
the assistant's).

Prompt logprobs: vLLM's ``prompt_logprobs`` is ``sampling.prompt_logprobs`` (refused with ``stream``, as vLLM
does); a completion's ``echo`` with ``logprobs`` asks the server for ``prompt_logprobs = logprobs`` too (the
larger of the two when both are set), as the echoed prompt tokens need theirs. ``echo`` alone asks for none.

Predicted outputs: OpenAI's ``prediction`` (``{"type": "content", "content": text or text parts}``, parts joined) is
every choice's GenerateRequest ``prediction`` (an empty content sets none); another type or a part that is not text is
a 400 naming it (``prediction.type``, ``prediction.content[1]``), and the gRPC checks' errors name ``prediction``.

Models (vLLM's multi-LoRA serving): ``model`` is empty or the served model's name (the base model), or the name of a
LoRA adapter the server serves (its ``--lora-modules``): the GenerateRequests then carry that name as their ``model``,
and the response echoes it; any other name is a 404 ``model_not_found`` listing what is served.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from typing import Any

import grpc

from scheduler_svc.http.errors import ApiError, invalid
from scheduler_svc.http.protocol import (
    ChatCompletionRequest,
    ChatMessage,
    ChatTemplateFields,
    CompletionRequest,
    Endpoint,
    Prediction,
    ResponseFormat,
    SamplingFields,
    StreamOptions,
)
from scheduler_svc.http.tools import ToolCalling, chat_tools, locate_schema_error, message_tool_calls
from scheduler_svc.http.unrecognized import refuse_unrecognized
from scheduler_svc.reasoning.request_split import splitting_parser
from scheduler_svc.reasoning.thinking_bounds import ThinkingBounds
from scheduler_svc.request import Request
from scheduler_svc.request_errors import InvalidRequestError
from scheduler_svc.tokenizer import Tokenizer
from scheduler_svc.validation import MAX_LOGPROBS, ModelLimits, build_request
from stepahead_proto import generation_pb2, sampling_pb2

MAX_CHOICES = 128
"""Most engine requests one HTTP request may start (prompts x n)."""
ROLE_ALIASES = {"developer": "system"}
RESPONSE_ROLE = "assistant"
"""The role of every chat response's message."""
_SEED_RANGE = (-(2**63), 2**64)
_INDEX = re.compile(r"\[\d+\]$")
_INT32_LIMIT = 2**31
_GUIDED_PARAMS = ("guided_json", "guided_regex", "guided_choice", "guided_grammar")
_STRUCTURED_OUTPUTS_PARAMS = ("structured_outputs.json", "structured_outputs.regex", "structured_outputs.choice",
                              "structured_outputs.grammar")
"""vLLM's two spellings of the same four formats: its guided_* parameters and its newer structured_outputs keys."""
_GUIDED_KINDS = {"json_schema": "guided_json", "regex": "guided_regex", "choice": "guided_choice",
                 "grammar": "guided_grammar", "json_object": "response_format"}
"""The parameter a structured output kind most likely came from, where the request is not known."""
_LIST_PARAMS = ("allowed_token_ids[", "bad_words[")
"""Sampling fields whose errors' indices are positions in the body's list of that name (kept in the parameter)."""
_RESTRICTION_PARAMS = ("allowed_token_ids", "bad_words")
"""vLLM's parameters that forbid tokens: not with a structured output format."""


@dataclass(frozen=True)
class GenerationPlan:
    """What one HTTP request asks the engine for."""

    endpoint: Endpoint
    model: str
    """The name the request runs as, each GenerateRequest's ``model`` and the response's: the served model's (also
    for an empty ``model``), or the LoRA adapter's the request names."""
    requests: list[generation_pb2.GenerateRequest]
    """One per choice, in choice order (prompt by prompt, n samples each)."""
    prompt_index: list[int]
    """The prompt each choice samples (usage counts every prompt once)."""
    stream: bool
    include_usage: bool
    logprobs: int | None
    """Top alternatives per position to return; None: no logprobs."""
    max_tokens_param: str = "max_tokens"
    """The parameter the client used for the output length, for error messages."""
    structured_output_param: str | None = None
    """The parameter that set the structured output format (``response_format`` or one of vLLM's ``guided_*``), for
    error messages; None: free text."""
    prompt_logprobs: int | None = None
    """vLLM's ``prompt_logprobs``: top alternatives per prompt position in the response's ``prompt_logprobs``;
    None: not asked (the engine may still score the prompt for ``echo``)."""
    echo: bool = False
    """A completion's ``echo``: the prompt (and with ``logprobs``, its tokens' logprobs) before each choice's
    output."""
    tool_calling: ToolCalling | None = None
    """A chat's tool_choice that makes the output tool calls (or, "auto", text that may hold them); None: text."""
    continuous_usage: bool = False
    """vLLM's ``stream_options.continuous_usage_stats``: every chunk carries the usage so far (with include_usage)."""
    tokens_as_ids: bool = False
    """vLLM's ``return_tokens_as_token_ids``: logprobs name tokens ``"token_id:{id}"``, not by their text."""
    echo_content: str = ""
    """A chat's ``echo``: the last message's content, which goes before each choice's content ("": none)."""
    response_role: str = RESPONSE_ROLE
    """The role of a chat's reply (vLLM's): the assistant's when the template adds a generation prompt, else the last
    message's (the reply continues that message)."""
    reasoning_parser: str | None = None
    """The server's --reasoning-parser when the engine splits this request's thinking from its content (a chat's,
    by the engine's own rule, request_split.splitting_parser: a format, or a tool_choice forcing calls, then
    constrains the answer after the thinking); None: the output is all content."""
    include_reasoning: bool = True
    """vLLM's ``include_reasoning``: false leaves the split-off thinking out of the response."""


def check_model(requested: str | None, served: str, adapters: tuple[str, ...] = ()) -> str:
    """The name a request for model ``requested`` runs and answers as: the served model's name when ``requested``
    is empty or that name, ``requested`` itself when it is one of the served LoRA ``adapters``; 404 otherwise."""
    if not requested or requested == served:
        return served
    if requested in adapters:
        return requested
    listed = f" and LoRA adapters {list(adapters)}" if adapters else ""
    raise ApiError(
        grpc.StatusCode.NOT_FOUND,
        f"model: the model {requested!r} does not exist; this server serves {served!r}{listed}",
        param="model",
        error_code="model_not_found",
    )


def chat_plan(body: ChatCompletionRequest, served_model: str, tool_call_parser: str | None = None,
              adapters: tuple[str, ...] = (), reasoning_parser: str | None = None,
              thinking_bounds: ThinkingBounds | None = None) -> GenerationPlan:
    """The engine requests of a chat completion (``tool_call_parser``: the server's, for tool_choice "auto";
    ``adapters``: the LoRA adapters ``model`` may name besides the served model; ``reasoning_parser``: the server's,
    splitting the thinking off the output, and ``thinking_bounds`` its markers in the model's tokenizer, which let a
    format wait for the thinking: ModelLimits')."""
    model = check_model(body.model, served_model, adapters)
    # before the unrecognized fields: a tool of another type is named by its type
    tools = chat_tools(body, tool_call_parser)
    prediction = prediction_text(body.prediction)  # before the unrecognized fields: a part is named by its type
    refuse_unrecognized(body)
    _refuse_unsupported_chat(body)
    if body.top_logprobs is not None and not body.logprobs:
        raise invalid("top_logprobs", "requires logprobs to be true")
    logprobs = (body.top_logprobs or 0) if body.logprobs else None
    if logprobs is not None and not 0 <= logprobs <= MAX_LOGPROBS:
        raise invalid("top_logprobs", f"must be in [0, {MAX_LOGPROBS}], got {logprobs}")
    if not body.messages:
        raise invalid("messages", "at least one message is required")
    prompt = generation_pb2.GenerateRequest(model=model, parse_tool_calls=False)  # tool_choice decides: tools.py
    prompt.chat.CopyFrom(chat_prompt(body.messages, tools.tools_json, body))
    give_reasoning_effort(prompt.chat, body)
    max_tokens, max_param = body.max_tokens, "max_tokens"
    if body.max_completion_tokens is not None:
        max_tokens, max_param = body.max_completion_tokens, "max_completion_tokens"
    plan = _plan("chat", body, model, [prompt], logprobs, max_tokens, max_param, tool_calling=tools.calling,
                 reasoning_parser=reasoning_parser, thinking_bounds=thinking_bounds, prediction=prediction)
    if body.thinking_token_budget is not None:
        for request in plan.requests:
            request.sampling.thinking_token_budget = body.thinking_token_budget
    role = _response_role(prompt.chat)
    return replace(plan, response_role=role, echo_content=_chat_echo(body, prompt.chat, role),
                   include_reasoning=body.include_reasoning is not False)


def give_reasoning_effort(chat: generation_pb2.ChatPrompt, body: ChatCompletionRequest) -> None:
    """OpenAI's ``reasoning_effort`` as the chat template variable of the name (vLLM's way), beside
    chat_template_kwargs, which may not set it to something else."""
    if body.reasoning_effort is None:
        return
    kwargs = dict(body.chat_template_kwargs or {})
    if kwargs.get("reasoning_effort", body.reasoning_effort) != body.reasoning_effort:
        raise invalid("reasoning_effort", f"{body.reasoning_effort!r} differs from chat_template_kwargs' "
                                          f"reasoning_effort {kwargs['reasoning_effort']!r} (give it once)")
    kwargs["reasoning_effort"] = body.reasoning_effort
    chat.template_kwargs_json = json.dumps(kwargs, ensure_ascii=False)


def _response_role(chat: generation_pb2.ChatPrompt) -> str:
    """vLLM's role of the reply: the assistant's when a generation prompt is added (the default, unless the final
    message is continued), else the last message's."""
    adds_prompt = chat.add_generation_prompt if chat.HasField("add_generation_prompt") else (
        not chat.continue_final_message)
    return RESPONSE_ROLE if adds_prompt else chat.messages[-1].role


def _chat_echo(body: ChatCompletionRequest, chat: generation_pb2.ChatPrompt, role: str) -> str:
    """vLLM's chat ``echo``: the last message's content (as the template read it) when that message has the
    response's role; "" otherwise or without echo."""
    last = chat.messages[-1]
    if not body.echo or last.role != role:
        return ""
    return last.content


def completion_plan(body: CompletionRequest, served_model: str, adapters: tuple[str, ...] = ()) -> GenerationPlan:
    """The engine requests of a (legacy) completion; a list of prompts gives n choices per prompt (``adapters``: the
    LoRA adapters ``model`` may name besides the served model)."""
    model = check_model(body.model, served_model, adapters)
    prediction = prediction_text(body.prediction)
    refuse_unrecognized(body)
    if body.suffix:
        raise invalid("suffix", "is not supported")
    if body.best_of is not None and body.best_of != body.n:
        raise invalid("best_of", "is not supported (only best_of = n)")
    if body.logprobs is not None and not 0 <= body.logprobs <= MAX_LOGPROBS:
        raise invalid("logprobs", f"must be in [0, {MAX_LOGPROBS}], got {body.logprobs}")
    prompts = [_completion_prompt(model, item) for item in _prompt_list(body.prompt)]
    return _plan("completion", body, model, prompts, body.logprobs, body.max_tokens, "max_tokens",
                 echo=bool(body.echo), prediction=prediction)


def build_engine_requests(plan: GenerationPlan, tokenizer: Tokenizer, limits: ModelLimits) -> list[Request]:
    """Validate every choice's request exactly as the gRPC API does (chat template and all); each prompt is
    tokenized once, however many samples (``n``) it has."""
    requests: list[Request] = []
    prompt_ids: dict[int, list[int]] = {}
    try:
        for pb, prompt in zip(plan.requests, plan.prompt_index):
            known = prompt_ids.get(prompt)
            request = build_request(pb, tokenizer, limits, None if known is None else list(known))
            prompt_ids[prompt] = request.prompt_token_ids
            requests.append(request)
    except InvalidRequestError as error:
        located = None
        if plan.tool_calling is not None:
            located = locate_schema_error(plan.tool_calling, tokenizer, limits, error)
        raise located or api_error(error, plan) from None
    return requests


def api_error(error: InvalidRequestError, plan: GenerationPlan) -> ApiError:
    """A validation error of the shared gRPC checks, renamed to the OpenAI parameter."""
    return renamed_error(error, plan.endpoint, plan.max_tokens_param, plan.structured_output_param)


def renamed_error(
    error: InvalidRequestError,
    endpoint: Endpoint,
    max_tokens_param: str = "max_tokens",
    structured_output_param: str | None = None,
) -> ApiError:
    """A 400 for a validation error of the shared gRPC checks, naming the HTTP parameter of ``endpoint``
    (``structured_output_param``: the one that set the structured output format, when known)."""
    return invalid(_param_name(error.field, endpoint, max_tokens_param, structured_output_param), error.reason)


def _param_name(field: str, endpoint: Endpoint, max_tokens_param: str, structured_output_param: str | None) -> str:
    prompt_param = "messages" if endpoint == "chat" else "prompt"
    section, _, rest = field.partition(".")
    if section == "sampling":
        if rest == "structured_output" or rest.startswith("structured_output."):
            return _structured_output_param(rest, structured_output_param)
        if rest == "logprobs":
            return "top_logprobs" if endpoint == "chat" else "logprobs"
        if rest.startswith(_LIST_PARAMS):
            return rest
        return _INDEX.sub("", rest)
    if section == "stopping":
        if rest == "max_tokens":
            return max_tokens_param
        return _INDEX.sub("", rest) if rest.startswith("stop[") else rest
    if section == "chat":
        if rest == "tools_json":
            return "tools"
        if rest == "documents_json":
            return "documents"
        if rest in ("add_generation_prompt", "continue_final_message", "chat_template"):
            return rest
        if rest.partition(".")[0] == "template_kwargs_json":
            return "chat_template_kwargs" + rest.removeprefix("template_kwargs_json")
        return "messages" + rest.removeprefix("messages").replace(".tool_calls_json", ".tool_calls")
    if section in ("prompt", "text", "token_ids"):
        return prompt_param
    return field


def _structured_output_param(rest: str, param: str | None) -> str:
    """``structured_output.<kind>...`` as the parameter that set it: ``guided_choice[2]`` for a choice's index,
    ``response_format.json_schema.schema`` for response_format's schema, else the parameter itself (when the
    request is not known, the one that usually sets that kind)."""
    kind = rest.split(".")[1] if "." in rest else ""
    if not kind and param is not None and param.startswith("tools"):
        return "tool_choice"  # not the tool's schema: structured output itself (the server cannot apply it)
    if param is None:
        param = _GUIDED_KINDS.get(kind, "response_format")
    index = _INDEX.search(rest)
    if param in ("guided_choice", "structured_outputs.choice") and index:
        return param + index.group()
    if param == "response_format" and kind == "json_schema":
        return "response_format.json_schema.schema"
    return param


def _plan(
    endpoint: Endpoint,
    body: SamplingFields,
    model: str,
    prompts: list[generation_pb2.GenerateRequest],
    logprobs: int | None,
    max_tokens: int | None,
    max_param: str,
    echo: bool = False,
    tool_calling: ToolCalling | None = None,
    reasoning_parser: str | None = None,
    thinking_bounds: ThinkingBounds | None = None,
    prediction: str | None = None,
) -> GenerationPlan:
    if not 1 <= body.n <= MAX_CHOICES:
        raise invalid("n", f"must be in [1, {MAX_CHOICES}], got {body.n}")
    if len(prompts) * body.n > MAX_CHOICES:
        raise invalid("n", f"prompts x n must be at most {MAX_CHOICES}, got {len(prompts)} x {body.n}")
    if body.store:
        raise invalid("store", "storing completions is not supported")
    if body.stream_options is not None and not body.stream:
        raise invalid("stream_options", "is only allowed with stream: true")
    include_usage, continuous_usage = _usage_options(body.stream_options)
    if body.seed is not None and not _SEED_RANGE[0] <= body.seed < _SEED_RANGE[1]:
        raise invalid("seed", "must fit in 64 bits")
    _check_prompt_logprobs(body)
    scored = [k for k in (body.prompt_logprobs, logprobs if echo else None) if k is not None]
    prompt_logprobs = max(scored) if scored else None
    stopping = _stopping(body, max_tokens)
    structured_output, structured_output_param = _structured_output(body)
    if tool_calling is not None and tool_calling.structured_output is not None:
        if structured_output_param is not None:
            raise invalid(structured_output_param, "only one output format may be set: tool_choice makes the output "
                                                   "tool calls")
        structured_output, structured_output_param = tool_calling.structured_output, tool_calling.schema_param
        _refuse_token_restrictions(body, "tool_choice", "makes the output tool calls")
    elif structured_output_param is not None:
        _refuse_token_restrictions(body, structured_output_param, "sets a structured output format")
    # A parser reads the text for markers that may be special tokens (<tool_call>): vLLM keeps them too. (The engine
    # keeps a reasoning parser's, as it splits the thinking off: validation.build_request.)
    keeps_special_tokens = tool_calling is not None and tool_calling.mode == "auto"
    requests, prompt_index = [], []
    for index, prompt in enumerate(prompts):
        for sample in range(body.n):
            request = generation_pb2.GenerateRequest()
            request.CopyFrom(prompt)
            request.sampling.CopyFrom(_sampling(body, sample, logprobs, prompt_logprobs))
            if structured_output is not None:
                request.sampling.structured_output.CopyFrom(structured_output)
            request.stopping.CopyFrom(stopping)
            if body.skip_special_tokens is not None:
                request.skip_special_tokens = body.skip_special_tokens
            elif keeps_special_tokens:
                request.skip_special_tokens = False
            if body.priority is not None:
                request.priority = body.priority
            if body.truncate_prompt_tokens is not None:
                request.truncate_prompt_tokens = body.truncate_prompt_tokens
            if prediction is not None:
                request.prediction = prediction
            requests.append(request)
            prompt_index.append(index)
    return GenerationPlan(endpoint, model, requests, prompt_index, body.stream, include_usage, logprobs, max_param,
                          structured_output_param, body.prompt_logprobs, echo, tool_calling, continuous_usage,
                          bool(body.return_tokens_as_token_ids),
                          reasoning_parser=splitting_parser(requests[0], reasoning_parser, thinking_bounds))


def prediction_text(prediction: Prediction | None) -> str | None:
    """OpenAI's ``prediction`` as the GenerateRequest's: its content, text parts joined; None when there is none (null,
    or an empty content: it predicts nothing). A part that is not text is a 400 naming it."""
    if prediction is None:
        return None
    content = prediction.content
    if isinstance(content, str):
        return content or None
    texts = []
    for index, part in enumerate(content):
        param = f"prediction.content[{index}]"
        if part.type != "text":
            raise invalid(param, f"only text parts are supported, got {part.type!r}")
        if part.text is None:
            raise invalid(f"{param}.text", "is required")
        texts.append(part.text)
    return "".join(texts) or None


def _usage_options(options: StreamOptions | None) -> tuple[bool, bool]:
    """(include_usage, continuous_usage_stats) of ``stream_options``. As in vLLM, continuous usage goes with the
    final usage: continuous_usage_stats alone implies include_usage (vLLM's defaults to true), and with
    include_usage false it is refused (vLLM would silently send neither)."""
    if options is None:
        return False, False
    continuous = bool(options.continuous_usage_stats)
    if continuous and options.include_usage is False:
        raise invalid("stream_options.continuous_usage_stats", "requires stream_options.include_usage (the usage "
                                                               "so far goes with the final usage)")
    return continuous or bool(options.include_usage), continuous


def _refuse_token_restrictions(body: SamplingFields, param: str, what: str) -> None:
    """400 naming ``allowed_token_ids`` or ``bad_words`` when given (non-empty) alongside ``param``, which ``what``
    (both restrict the tokens, and a format may need exactly those forbidden)."""
    for name in _RESTRICTION_PARAMS:
        if getattr(body, name):
            raise invalid(name, f"cannot be combined with {param}, which {what} (both restrict the tokens the model "
                                "may choose)")


def _check_prompt_logprobs(body: SamplingFields) -> None:
    """vLLM's ``prompt_logprobs``: in range, and not with ``stream`` (vLLM refuses that pair too)."""
    if body.prompt_logprobs is None:
        return
    if not 0 <= body.prompt_logprobs <= MAX_LOGPROBS:
        raise invalid("prompt_logprobs", f"must be in [0, {MAX_LOGPROBS}], got {body.prompt_logprobs}")
    if body.stream:
        raise invalid("prompt_logprobs", "is not available with stream: true")


def _structured_output(body: SamplingFields) -> tuple[sampling_pb2.StructuredOutput | None, str | None]:
    """The format the request sets and the parameter that set it (None, None: free text); 400 naming the second
    when two are set, in the order response_format, guided_json, guided_regex, guided_choice, guided_grammar,
    structured_outputs (its keys).

    Null, an empty string and an empty list set nothing (as for any parameter: a neutral value asks for nothing);
    ``response_format`` ``{"type": "text"}`` asks for free text. The format's own checks are the gRPC API's."""
    formats: list[tuple[str, sampling_pb2.StructuredOutput]] = []
    if body.response_format is not None:
        response_format = _response_format(body.response_format)
        if response_format is not None:
            formats.append(("response_format", response_format))
    formats += _guided_formats(_GUIDED_PARAMS, body.guided_json, body.guided_regex, body.guided_choice,
                               body.guided_grammar)
    given = body.structured_outputs
    if given is not None:
        formats += _guided_formats(_STRUCTURED_OUTPUTS_PARAMS, given.json_, given.regex, given.choice, given.grammar)
        if given.json_object:
            formats.append(("structured_outputs.json_object", sampling_pb2.StructuredOutput(json_object=True)))
    if len(formats) > 1:
        (first, _), (second, _) = formats[:2]
        raise invalid(second, f"only one structured output format may be set ({first} is set too)")
    if not formats:
        return None, None
    param, format_ = formats[0]
    return format_, param


def _guided_formats(
    params: tuple[str, str, str, str], schema: dict[str, Any] | str | None, regex: str | None,
    choice: list[str] | None, grammar: str | None,
) -> list[tuple[str, sampling_pb2.StructuredOutput]]:
    """vLLM's guided formats (a JSON Schema as an object or its text, a regex, choices, a grammar), each with the
    parameter that set it (``params``, in that order); neutral values set nothing."""
    json_param, regex_param, choice_param, grammar_param = params
    formats = []
    if schema is not None and schema != "":
        text = schema if isinstance(schema, str) else json.dumps(schema)
        formats.append((json_param, sampling_pb2.StructuredOutput(json_schema=text)))
    if regex:
        formats.append((regex_param, sampling_pb2.StructuredOutput(regex=regex)))
    if choice:
        formats.append((choice_param, sampling_pb2.StructuredOutput(choice=sampling_pb2.ChoiceList(choices=choice))))
    if grammar:
        formats.append((grammar_param, sampling_pb2.StructuredOutput(grammar=grammar)))
    return formats


def _response_format(response_format: ResponseFormat) -> sampling_pb2.StructuredOutput | None:
    """OpenAI's response_format as a format (None: free text)."""
    if response_format.type != "json_schema":
        if response_format.json_schema is not None:
            raise invalid("response_format.json_schema", "is only allowed with type json_schema")
        if response_format.type == "text":
            return None
        return sampling_pb2.StructuredOutput(json_object=True)
    if response_format.json_schema is None:
        raise invalid("response_format.json_schema", "is required with type json_schema")
    schema = response_format.json_schema.schema_
    if schema is None:
        raise invalid("response_format.json_schema.schema", "is required (the JSON Schema the output follows)")
    return sampling_pb2.StructuredOutput(json_schema=json.dumps(schema))


def _sampling(
    body: SamplingFields, sample: int, logprobs: int | None, prompt_logprobs: int | None
) -> sampling_pb2.SamplingParams:
    params = sampling_pb2.SamplingParams()
    for name in ("temperature", "top_p", "min_p", "repetition_penalty", "presence_penalty", "frequency_penalty"):
        value = getattr(body, name)
        if value is not None:
            setattr(params, name, value)
    if body.top_k is not None:
        params.top_k = -1 if body.top_k == 0 else body.top_k  # vLLM: 0 also means "off"
    if body.seed is not None:
        params.seed = (body.seed + sample) % 2**64
    if logprobs is not None:
        params.logprobs = logprobs
    if prompt_logprobs is not None:
        params.prompt_logprobs = prompt_logprobs
    for token_id, bias in _logit_bias(body.logit_bias).items():
        params.logit_bias[token_id] = bias
    params.allowed_token_ids.extend(body.allowed_token_ids or ())
    params.bad_words.extend(body.bad_words or ())
    return params


def _logit_bias(raw: dict[str, Any] | None) -> dict[int, float]:
    """OpenAI's logit_bias (token ids as JSON object keys) as ints; ranges are the gRPC API's checks."""
    bias: dict[int, float] = {}
    for key, value in (raw or {}).items():
        if not re.fullmatch(r"\d+", key) or int(key) >= _INT32_LIMIT:
            raise invalid("logit_bias", f"keys must be token ids (integers >= 0), got {key!r}")
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise invalid("logit_bias", f"the bias of token {key} must be a number, got {value!r}")
        bias[int(key)] = float(value)
    return bias


def _stopping(body: SamplingFields, max_tokens: int | None) -> sampling_pb2.StoppingParams:
    params = sampling_pb2.StoppingParams()
    if max_tokens is not None:
        params.max_tokens = max_tokens
    if body.min_tokens is not None:
        params.min_tokens = body.min_tokens
    if body.stop is not None:
        params.stop.extend([body.stop] if isinstance(body.stop, str) else body.stop)
    if body.stop_token_ids is not None:
        params.stop_token_ids.extend(body.stop_token_ids)
    if body.ignore_eos is not None:
        params.ignore_eos = body.ignore_eos
    if body.include_stop_str_in_output is not None:
        params.include_stop_str_in_output = body.include_stop_str_in_output
    return params


def _refuse_unsupported_chat(body: ChatCompletionRequest) -> None:
    if body.functions:
        raise invalid("functions", "the deprecated functions are not supported: use tools")


def chat_prompt(messages: list[ChatMessage], tools_json: str = "",
                template: ChatTemplateFields | None = None) -> generation_pb2.ChatPrompt:
    """``messages`` as the gRPC API's ChatPrompt (OpenAI's "developer" role is "system"; text parts joined; an
    assistant's tool calls, a tool's call id and the author's name kept), with the tools the template is given (JSON
    text) and the request's chat template controls (``template``: add_generation_prompt, continue_final_message,
    chat_template_kwargs and documents as the ChatPrompt's JSON texts; the gRPC checks judge them)."""
    prompt = generation_pb2.ChatPrompt(tools_json=tools_json)
    if template is not None:
        if template.add_generation_prompt is not None:
            prompt.add_generation_prompt = template.add_generation_prompt
        prompt.continue_final_message = bool(template.continue_final_message)
        if template.chat_template_kwargs:
            prompt.template_kwargs_json = json.dumps(template.chat_template_kwargs, ensure_ascii=False)
        if template.documents:
            prompt.documents_json = json.dumps(template.documents, ensure_ascii=False)
        if template.chat_template:
            prompt.chat_template = template.chat_template
    for index, message in enumerate(messages):
        prompt.messages.add(role=ROLE_ALIASES.get(message.role, message.role), content=_content(message, index),
                            tool_calls_json=message_tool_calls(message, index),
                            tool_call_id=message.tool_call_id or "", name=message.name or "",
                            reasoning_content=_reasoning(message, index))
    return prompt


def _reasoning(message: ChatMessage, index: int) -> str:
    """A message's thinking, given as ``reasoning`` (vLLM's) or ``reasoning_content`` (DeepSeek's, SGLang's): both
    only if they agree ("": none)."""
    reasoning, reasoning_content = message.reasoning or "", message.reasoning_content or ""
    if reasoning and reasoning_content and reasoning != reasoning_content:
        raise invalid(f"messages[{index}].reasoning_content",
                      "differs from the message's reasoning (give the thinking once, in either field)")
    return reasoning or reasoning_content


def _content(message: ChatMessage, index: int) -> str:
    content = message.content
    if content is None or isinstance(content, str):
        return content or ""
    texts = []
    for part_index, part in enumerate(content):
        if part.type != "text" or part.text is None:
            param = f"messages[{index}].content[{part_index}]"
            raise invalid(param, f"only text parts are supported, got {part.type!r}")
        texts.append(part.text)
    return "".join(texts)


def _prompt_list(prompt: str | list[str] | list[int] | list[list[int]]) -> list[str | list[int]]:
    if isinstance(prompt, str):
        return [prompt]
    if not prompt:
        raise invalid("prompt", "must not be empty")
    if isinstance(prompt[0], int):
        return [[token for token in prompt if isinstance(token, int)]]
    return [item for item in prompt if isinstance(item, str | list)]


def _completion_prompt(model: str, prompt: str | list[int]) -> generation_pb2.GenerateRequest:
    request = generation_pb2.GenerateRequest(model=model)
    if isinstance(prompt, str):
        request.text = prompt
    else:
        request.token_ids.ids.extend(prompt)
    return request
