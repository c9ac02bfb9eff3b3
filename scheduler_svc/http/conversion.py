"""OpenAI request bodies -> GenerateRequest protos, one per choice; validation errors -> OpenAI parameters.

Every range and prompt check is the gRPC API's own (validation.build_request): this module only
maps names (``max_completion_tokens`` -> ``stopping.max_tokens``, ``messages`` -> ``chat``) and
refuses what only exists over HTTP (``n``, ``top_logprobs`` without ``logprobs``, ``logit_bias`` keys that are
not token ids, unsupported OpenAI parameters). ``n`` samples of one prompt are ``n`` engine requests; with a ``seed``,
sample ``i`` uses ``seed + i``, so each sample is reproducible on its own.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import grpc

from scheduler_svc.http.errors import ApiError, invalid
from scheduler_svc.http.protocol import (
    ChatCompletionRequest,
    ChatMessage,
    CompletionRequest,
    Endpoint,
    SamplingFields,
)
from scheduler_svc.http.unrecognized import refuse_unrecognized
from scheduler_svc.request import Request
from scheduler_svc.tokenizer import Tokenizer
from scheduler_svc.validation import MAX_LOGPROBS, InvalidRequestError, ModelLimits, build_request
from stepahead_proto import generation_pb2, sampling_pb2

MAX_CHOICES = 128
"""Most engine requests one HTTP request may start (prompts x n)."""
ROLE_ALIASES = {"developer": "system"}
_SEED_RANGE = (-(2**63), 2**64)
_INDEX = re.compile(r"\[\d+\]$")
_INT32_LIMIT = 2**31


@dataclass(frozen=True)
class GenerationPlan:
    """What one HTTP request asks the engine for."""

    endpoint: Endpoint
    model: str
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


def check_model(requested: str | None, served: str) -> None:
    """404 unless ``requested`` is empty or the served model's name."""
    if requested and requested != served:
        raise ApiError(
            grpc.StatusCode.NOT_FOUND,
            f"model: the model {requested!r} does not exist; this server serves {served!r}",
            param="model",
            error_code="model_not_found",
        )


def chat_plan(body: ChatCompletionRequest, served_model: str) -> GenerationPlan:
    """The engine requests of a chat completion."""
    check_model(body.model, served_model)
    refuse_unrecognized(body)
    _refuse_unsupported_chat(body)
    if body.top_logprobs is not None and not body.logprobs:
        raise invalid("top_logprobs", "requires logprobs to be true")
    logprobs = (body.top_logprobs or 0) if body.logprobs else None
    if logprobs is not None and not 0 <= logprobs <= MAX_LOGPROBS:
        raise invalid("top_logprobs", f"must be in [0, {MAX_LOGPROBS}], got {logprobs}")
    if not body.messages:
        raise invalid("messages", "at least one message is required")
    prompt = generation_pb2.GenerateRequest(model=served_model)
    prompt.chat.CopyFrom(chat_prompt(body.messages))
    max_tokens, max_param = body.max_tokens, "max_tokens"
    if body.max_completion_tokens is not None:
        max_tokens, max_param = body.max_completion_tokens, "max_completion_tokens"
    return _plan("chat", body, served_model, [prompt], logprobs, max_tokens, max_param)


def completion_plan(body: CompletionRequest, served_model: str) -> GenerationPlan:
    """The engine requests of a (legacy) completion; a list of prompts gives n choices per prompt."""
    check_model(body.model, served_model)
    refuse_unrecognized(body)
    if body.echo:
        raise invalid("echo", "is not supported")
    if body.suffix:
        raise invalid("suffix", "is not supported")
    if body.best_of is not None and body.best_of != body.n:
        raise invalid("best_of", "is not supported (only best_of = n)")
    if body.logprobs is not None and not 0 <= body.logprobs <= MAX_LOGPROBS:
        raise invalid("logprobs", f"must be in [0, {MAX_LOGPROBS}], got {body.logprobs}")
    prompts = [_completion_prompt(served_model, item) for item in _prompt_list(body.prompt)]
    return _plan("completion", body, served_model, prompts, body.logprobs, body.max_tokens, "max_tokens")


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
        raise api_error(error, plan) from None
    return requests


def api_error(error: InvalidRequestError, plan: GenerationPlan) -> ApiError:
    """A validation error of the shared gRPC checks, renamed to the OpenAI parameter."""
    return renamed_error(error, plan.endpoint, plan.max_tokens_param)


def renamed_error(error: InvalidRequestError, endpoint: Endpoint, max_tokens_param: str = "max_tokens") -> ApiError:
    """A 400 for a validation error of the shared gRPC checks, naming the HTTP parameter of ``endpoint``."""
    return invalid(_param_name(error.field, endpoint, max_tokens_param), error.reason)


def _param_name(field: str, endpoint: Endpoint, max_tokens_param: str) -> str:
    prompt_param = "messages" if endpoint == "chat" else "prompt"
    section, _, rest = field.partition(".")
    if section == "sampling":
        if rest == "logprobs":
            return "top_logprobs" if endpoint == "chat" else "logprobs"
        return _INDEX.sub("", rest)
    if section == "stopping":
        if rest == "max_tokens":
            return max_tokens_param
        return _INDEX.sub("", rest) if rest.startswith("stop[") else rest
    if section == "chat":
        return "messages" + rest.removeprefix("messages") if rest else "messages"
    if section in ("prompt", "text", "token_ids"):
        return prompt_param
    return field


def _plan(
    endpoint: Endpoint,
    body: SamplingFields,
    model: str,
    prompts: list[generation_pb2.GenerateRequest],
    logprobs: int | None,
    max_tokens: int | None,
    max_param: str,
) -> GenerationPlan:
    if not 1 <= body.n <= MAX_CHOICES:
        raise invalid("n", f"must be in [1, {MAX_CHOICES}], got {body.n}")
    if len(prompts) * body.n > MAX_CHOICES:
        raise invalid("n", f"prompts x n must be at most {MAX_CHOICES}, got {len(prompts)} x {body.n}")
    if body.store:
        raise invalid("store", "storing completions is not supported")
    if body.stream_options is not None and not body.stream:
        raise invalid("stream_options", "is only allowed with stream: true")
    if body.seed is not None and not _SEED_RANGE[0] <= body.seed < _SEED_RANGE[1]:
        raise invalid("seed", "must fit in 64 bits")
    stopping = _stopping(body, max_tokens)
    requests, prompt_index = [], []
    for index, prompt in enumerate(prompts):
        for sample in range(body.n):
            request = generation_pb2.GenerateRequest()
            request.CopyFrom(prompt)
            request.sampling.CopyFrom(_sampling(body, sample, logprobs))
            request.stopping.CopyFrom(stopping)
            if body.skip_special_tokens is not None:
                request.skip_special_tokens = body.skip_special_tokens
            requests.append(request)
            prompt_index.append(index)
    include_usage = body.stream_options is not None and body.stream_options.include_usage
    return GenerationPlan(endpoint, model, requests, prompt_index, body.stream, include_usage, logprobs, max_param)


def _sampling(body: SamplingFields, sample: int, logprobs: int | None) -> sampling_pb2.SamplingParams:
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
    for token_id, bias in _logit_bias(body.logit_bias).items():
        params.logit_bias[token_id] = bias
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
    if body.tools:
        raise invalid("tools", "tool calling is not supported")
    if body.functions:
        raise invalid("functions", "function calling is not supported")
    if body.tool_choice not in (None, "none", "auto"):
        raise invalid("tool_choice", "tool calling is not supported (only none or auto, without tools)")
    for index, message in enumerate(body.messages):
        if message.tool_calls:
            raise invalid(f"messages[{index}].tool_calls", "tool calling is not supported")
    if body.response_format is not None and body.response_format.get("type", "text") != "text":
        raise invalid("response_format", "only {'type': 'text'} is supported")


def chat_prompt(messages: list[ChatMessage]) -> generation_pb2.ChatPrompt:
    """``messages`` as the gRPC API's ChatPrompt (OpenAI's "developer" role is "system"; text parts joined)."""
    prompt = generation_pb2.ChatPrompt()
    for index, message in enumerate(messages):
        prompt.messages.add(role=ROLE_ALIASES.get(message.role, message.role), content=_content(message, index))
    return prompt


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
