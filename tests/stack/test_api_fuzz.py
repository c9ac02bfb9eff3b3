"""Fuzzing the public Generate RPC with hypothesis: random and hostile values in every GenerateRequest field
(huge strings, out-of-vocabulary ids, extreme, negative, NaN and infinite numbers, thousands of stop strings,
duplicate ids, hostile structured output formats, tool fields, earlier turns' thinking and chat template controls,
allowed token ids, bad words and prompt truncation, invalid UTF-8, oversize and malformed messages), sent through a
raw channel so no SDK check hides anything; Tokenize and Detokenize likewise.
Only proper status codes come back, the server stays up, and at the end no KV block is held and no request is left in
the scheduler. Derandomized: the same cases every run."""

from __future__ import annotations

import math
import time
from typing import Any, NamedTuple

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from client import Client
from stepahead_proto import generation_pb2, sampling_pb2

pytestmark = pytest.mark.stack

GENERATE = "/stepahead.v1.Generation/Generate"
TOKENIZE = "/stepahead.v1.Generation/Tokenize"
DETOKENIZE = "/stepahead.v1.Generation/Detokenize"
NUM_CASES = 700  # about 20 s of CI on 2 cores; raise it locally for a longer run
NUM_TOKENIZER_CASES = 300
MAX_MESSAGE_BYTES = 64 * 1024  # the stack's --max-request-bytes, so oversize cases are cheap to make
ALLOWED = {grpc.StatusCode.OK, grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.ALREADY_EXISTS,
           grpc.StatusCode.RESOURCE_EXHAUSTED}

INT32 = st.one_of(st.integers(-5, 500), st.sampled_from([-(2**31), 2**31 - 1, 399, 400, 511, 512, 513]))
FLOAT = st.one_of(st.floats(-3, 3), st.sampled_from([math.nan, math.inf, -math.inf, 1e38, -1e-38, 0.0]))
TEXT = st.one_of(st.text(max_size=20), st.sampled_from(["", "\x00", "\ud7ff" * 3, "a" * 40_000, "é" * 5000]))
FORMAT_TEXT = st.one_of(TEXT, st.sampled_from([
    "(a*)*b", "a{1000000}", "[", "(?P<x>a)(?P=x)", "\\", "[a-z]{2,}@[a-z]+\\.com", '{"type": "object"}', "true",
    '{"type": "string", "pattern": "(a|a)*$"}', '{"$ref": "#/nope"}', "[" * 5000, '{"type": ["integer", "null"]}',
    'start: "a" start | "b"', "start: start", "root ::= [0-9]+", '{"minLength": 100000, "type": "string"}']))
TOOLS_TEXT = st.one_of(TEXT, st.sampled_from([
    "[]", "{}", "[1]", "[" * 5000, "[" + '{"a":' * 900 + "1" + "}" * 900 + "]", '[{"function": 5}]',
    '[{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{\\"x\\": 1}"}}]',
    '[{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]']))
TEMPLATE_KWARGS_TEXT = st.one_of(TEXT, TOOLS_TEXT, st.sampled_from([
    "{}", '{"enable_thinking": false}', '{"messages": []}', '{"bos_token": "x", "a": 1}', '{"raise_exception": 1}',
    '{"namespace": null}', '{"": 1, "a b": [1, {"c": null}]}', "null", '"x"', "{" * 5000,
    '{"a":' * 900 + "1" + "}" * 900, '{"x": "' + "y" * 40_000 + '"}', '{"x": "' + "y" * 70_000 + '"}',
    '{"x": NaN, "y": -Infinity}', '{"x": 1e999}']))
"""Hostile ChatPrompt.template_kwargs_json: not JSON, not an object, reserved names, deep nesting, oversize."""
DOCUMENTS_TEXT = st.one_of(TEXT, TOOLS_TEXT, st.sampled_from([
    "[]", '[{"title": "Paris", "text": "The capital of France."}]', '[{"text": 5}, {}]', '["text"]', '{"title": "x"}',
    "[" + '{"text": "' + "y" * 70_000 + '"}]', '[{"title": {"a": [1, 2]}, "text": null}]']))
"""Hostile ChatPrompt.documents_json: not JSON, not an array of objects, odd values, oversize."""
ALLOWED_TOKEN_IDS = st.one_of(st.lists(INT32, min_size=1, max_size=6), st.sampled_from([
    [0, 2], [5], [5, 5, 5], list(range(400)), list(range(401)), [7] * 3000, [-1], [399, 400]]))
"""Hostile SamplingParams.allowed_token_ids (the tiny model's vocabulary is 400, EOS 2 and 0): out of the vocabulary,
more ids than it has, duplicates, only EOS, all of it."""
BAD_WORDS = st.one_of(st.lists(TEXT, min_size=1, max_size=3), st.sampled_from([
    ["hello"], [" world", "hello world"], ["a", "e", "i", "o", "u", " "], [""], ["  \t"], ["x" * 257], ["x" * 256],
    ["w"] * 129, ["\x00"], ["<|im_end|>"], ["é" * 5, "\ud7ff"]]))
"""Hostile SamplingParams.bad_words: blank, empty, too long, too many, special tokens' text, one-character words."""
TRUNCATE_PROMPT_TOKENS = st.one_of(st.sampled_from([-1, -1, 1, 2, 0, -2, 511, 512, 513, 2**31 - 1, -(2**31)]), INT32)
"""GenerateRequest.truncate_prompt_tokens: -1 (the context's limit), tiny, past the context, zero and negatives."""
SMALL_MAX_TOKENS = st.integers(1, 2)  # accepted requests stay short: 2,000 cases in about 1.5 minutes


@st.composite
def sampling_params(draw) -> sampling_pb2.SamplingParams:
    params = sampling_pb2.SamplingParams()
    for name in ("temperature", "top_p", "min_p", "repetition_penalty", "presence_penalty", "frequency_penalty"):
        if draw(st.booleans()):
            setattr(params, name, draw(FLOAT))
    if draw(st.booleans()):
        params.top_k = draw(INT32)
    if draw(st.booleans()):
        params.seed = draw(st.one_of(st.integers(0, 10), st.just(2**64 - 1)))
    if draw(st.booleans()):
        params.logprobs = draw(INT32)
    if draw(st.booleans()):
        bias = st.one_of(st.floats(-150, 150), st.sampled_from([math.nan, math.inf, -100.0, 100.0]))
        params.logit_bias.update(draw(st.dictionaries(INT32, bias, max_size=4)))
    if draw(st.integers(0, 3)) == 0:
        params.allowed_token_ids.extend(draw(ALLOWED_TOKEN_IDS))
    if draw(st.integers(0, 3)) == 0:
        params.bad_words.extend(draw(BAD_WORDS))
    if draw(st.integers(0, 3)) == 0:
        _set_format(draw, params.structured_output)
    if draw(st.integers(0, 5)) == 0:
        params.thinking_token_budget = draw(st.one_of(st.integers(-2, 3), INT32))
    return params


def _set_format(draw, format_: sampling_pb2.StructuredOutput) -> None:
    """A structured output format, hostile or not (an empty message sets none of its kinds)."""
    kind = draw(st.sampled_from(["json_schema", "regex", "grammar", "json_object", "choice", "empty"]))
    if kind == "json_object":
        format_.json_object = draw(st.booleans())
    elif kind == "choice":
        format_.choice.choices.extend(draw(st.lists(TEXT, max_size=3)))
    elif kind == "empty":
        format_.SetInParent()
    else:
        setattr(format_, kind, draw(FORMAT_TEXT))


@st.composite
def stopping_params(draw) -> sampling_pb2.StoppingParams:
    params = sampling_pb2.StoppingParams()
    params.max_tokens = draw(st.one_of(SMALL_MAX_TOKENS, st.sampled_from([0, -1, 600, 2**31 - 1, -(2**31)])))
    if draw(st.booleans()):
        params.min_tokens = draw(st.one_of(st.integers(0, 3), INT32))
    stop_count = draw(st.sampled_from([0, 0, 1, 3, 65, 3000]))
    params.stop.extend(draw(st.lists(TEXT, min_size=min(stop_count, 3), max_size=min(stop_count, 3))))
    params.stop.extend(["x"] * max(0, stop_count - 3))
    params.stop_token_ids.extend(draw(st.lists(INT32, max_size=4)))
    params.ignore_eos = draw(st.booleans())
    params.include_stop_str_in_output = draw(st.booleans())
    return params


@st.composite
def plain_request(draw) -> bytes:
    """A well-formed request the server must accept, so accepted work is interleaved with the hostile cases."""
    request = generation_pb2.GenerateRequest(text="Hello " + draw(st.text(max_size=10)))
    request.stopping.max_tokens = draw(SMALL_MAX_TOKENS)
    if draw(st.booleans()):
        request.sampling.temperature = draw(st.floats(0, 2))
    return request.SerializeToString()


@st.composite
def generate_requests(draw) -> bytes:
    if draw(st.integers(0, 9)) == 0:
        return draw(plain_request())
    request = generation_pb2.GenerateRequest(
        request_id=draw(st.one_of(st.just(""), st.sampled_from(["dup", "x" * 300]), st.text(max_size=8))),
        model=draw(st.sampled_from(["", "", "tiny_llama0", "other-model", "\x00"])),
        sampling=draw(sampling_params()),
        stopping=draw(stopping_params()),
        disable_speculation=draw(st.booleans()),
        priority=draw(st.one_of(st.just(0), st.integers(-3, 3), st.integers(-2**31, 2**31 - 1))),
    )
    prompt = draw(st.sampled_from(["text", "chat", "token_ids", "none"]))
    if prompt == "text":
        request.text = draw(TEXT)
    elif prompt == "chat":
        for _ in range(draw(st.integers(0, 3))):
            message = request.chat.messages.add(role=draw(st.sampled_from(["user", "system", "assistant", "tool",
                                                                           "robot", ""])), content=draw(TEXT))
            if draw(st.integers(0, 3)) == 0:
                message.tool_calls_json = draw(TOOLS_TEXT)
                message.tool_call_id = draw(TEXT)
                message.name = draw(TEXT)
                message.reasoning_content = draw(TEXT)
        if draw(st.integers(0, 3)) == 0:
            request.chat.tools_json = draw(TOOLS_TEXT)
        _set_template_options(draw, request.chat)
    elif prompt == "token_ids":
        request.token_ids.ids.extend(draw(st.lists(INT32, max_size=6)) + [5] * draw(st.sampled_from([0, 0, 600])))
    if draw(st.booleans()):
        request.skip_special_tokens = draw(st.booleans())
    if draw(st.integers(0, 3)) == 0:
        request.split_reasoning = draw(st.booleans())
    if draw(st.integers(0, 3)) == 0:
        request.parse_tool_calls = draw(st.booleans())
    if draw(st.integers(0, 5)) == 0:
        request.parallel_tool_calls = draw(st.booleans())
    if draw(st.integers(0, 3)) == 0:
        request.truncate_prompt_tokens = draw(TRUNCATE_PROMPT_TOKENS)
    if draw(st.integers(0, 3)) == 0:
        request.prediction = draw(st.one_of(TEXT, st.just("Hello " * 3000)))
    data = request.SerializeToString()
    damage = draw(st.sampled_from(["none"] * 6 + ["bad_utf8", "truncate", "garbage", "oversize"]))
    if damage == "bad_utf8":  # field 3 (text), length-delimited, with bytes that are not UTF-8
        return data + b"\x1a\x04\xff\xfe\xc3\x28"
    return _damaged(draw, data, damage, model_tag=b"\x12")


@st.composite
def tokenizer_requests(draw) -> tuple[str, bytes]:
    """A hostile Tokenize or Detokenize request: (method path, serialized message)."""
    model = draw(st.sampled_from(["", "", "tiny_llama0", "other-model", "\x00"]))
    if draw(st.booleans()):
        request = generation_pb2.DetokenizeRequest(model=model)
        request.token_ids.extend(draw(st.lists(INT32, max_size=6)) + [5] * draw(st.sampled_from([0, 0, 600])))
        if draw(st.booleans()):
            request.skip_special_tokens = draw(st.booleans())
        method = DETOKENIZE
    else:
        request = generation_pb2.TokenizeRequest(model=model)
        prompt = draw(st.sampled_from(["text", "chat", "none"]))
        if prompt == "text":
            request.text = draw(TEXT)
        elif prompt == "chat":
            for _ in range(draw(st.integers(0, 3))):
                request.chat.messages.add(role=draw(st.sampled_from(["user", "system", "assistant", "robot", ""])),
                                          content=draw(TEXT))
            _set_template_options(draw, request.chat)
        method = TOKENIZE
    data = request.SerializeToString()
    damage = draw(st.sampled_from(["none"] * 6 + ["truncate", "garbage", "oversize"]))
    return method, _damaged(draw, data, damage, model_tag=b"\x0a")


def _set_template_options(draw, chat: generation_pb2.ChatPrompt) -> None:
    """The chat template controls, hostile or not: add_generation_prompt unset, false or true (with
    continue_final_message too: refused), continue_final_message whatever the last message's role, template kwargs,
    documents."""
    generation_prompt = draw(st.sampled_from([None, None, False, True]))
    if generation_prompt is not None:
        chat.add_generation_prompt = generation_prompt
    chat.continue_final_message = draw(st.integers(0, 3)) == 0
    if draw(st.integers(0, 2)) == 0:
        chat.template_kwargs_json = draw(TEMPLATE_KWARGS_TEXT)
    if draw(st.integers(0, 3)) == 0:
        chat.documents_json = draw(DOCUMENTS_TEXT)


def _damaged(draw, data: bytes, damage: str, model_tag: bytes) -> bytes:
    """``data`` cut short, replaced by garbage, or with 64 KiB of "m" appended as its ``model`` field (whose tag
    byte is ``model_tag``); unchanged for "none"."""
    if damage == "truncate" and data:
        return data[: draw(st.integers(0, len(data) - 1))]
    if damage == "garbage":
        return draw(st.binary(min_size=1, max_size=64))
    if damage == "oversize":
        return data + model_tag + _varint(MAX_MESSAGE_BYTES) + b"m" * MAX_MESSAGE_BYTES
    return data


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


class FuzzTarget(NamedTuple):
    """The stack under fuzz, its raw Generate call, the status codes seen so far, and a raw channel to it."""

    stack: Any
    generate: Any
    codes: list[grpc.StatusCode]
    channel: grpc.Channel
    tokenizer_codes: list[grpc.StatusCode]


@pytest.fixture(scope="module")
def fuzz_target(tiny_model_dir):
    from client.stack import LocalStack

    stack = LocalStack(str(tiny_model_dir), ["--num-threads", "1", "--num-kv-blocks", "64"],
                       ["--max-request-bytes", str(MAX_MESSAGE_BYTES), "--max-queued-requests", "64",
                        "--scheduling-policy", "priority",  # requests' priorities reorder and preempt
                        "--reasoning-parser", "qwen3",  # chat outputs split (and split_reasoning honoured)
                        "--tool-call-parser", "pythonic"])  # and parsed for calls (parse_tool_calls honoured)
    stack.start(timeout_s=600)
    channel = grpc.insecure_channel(stack.address)
    generate = channel.unary_stream(GENERATE, request_serializer=lambda data: data,
                                    response_deserializer=generation_pb2.GenerateResponse.FromString)
    try:
        yield FuzzTarget(stack, generate, [], channel, [])
    finally:
        channel.close()
        stack.stop()


@settings(max_examples=NUM_CASES, derandomize=True, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                 HealthCheck.data_too_large, HealthCheck.large_base_example])
@given(data=generate_requests())
def test_generate_answers_every_hostile_request_with_a_proper_status(fuzz_target, data):
    generate, codes = fuzz_target.generate, fuzz_target.codes
    try:
        for _ in generate(data, timeout=30):
            pass
        code = grpc.StatusCode.OK
    except grpc.RpcError as error:
        code = error.code()
        assert code in ALLOWED, (code, error.details(), data[:200])
        assert error.details(), code  # every refusal says why
    codes.append(code)


@settings(max_examples=NUM_TOKENIZER_CASES, derandomize=True, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                 HealthCheck.data_too_large, HealthCheck.large_base_example])
@given(case=tokenizer_requests())
def test_tokenize_and_detokenize_answer_every_hostile_request_with_a_proper_status(fuzz_target, case):
    method, data = case
    call = fuzz_target.channel.unary_unary(method, request_serializer=lambda raw: raw,
                                           response_deserializer=lambda raw: raw)
    try:
        call(data, timeout=30)
        code = grpc.StatusCode.OK
    except grpc.RpcError as error:
        code = error.code()
        allowed = {grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.RESOURCE_EXHAUSTED}
        assert code in allowed and error.details(), (code, error.details(), data[:200])
    fuzz_target.tokenizer_codes.append(code)


def test_after_the_fuzz_the_server_is_up_with_nothing_held(fuzz_target):
    stack, codes, tokenizer_codes = fuzz_target.stack, fuzz_target.codes, fuzz_target.tokenizer_codes
    assert len(codes) >= NUM_CASES  # hypothesis ran every case (the fuzz tests run first in this module)
    assert len(tokenizer_codes) >= NUM_TOKENIZER_CASES
    assert {grpc.StatusCode.OK, grpc.StatusCode.INVALID_ARGUMENT} <= set(codes) & set(tokenizer_codes)
    with Client(stack.address) as client:
        deadline = time.monotonic() + 10
        while True:
            info = client.model_info()
            if info.num_free_kv_blocks == info.num_kv_blocks and info.num_running == info.num_waiting == 0:
                break
            assert time.monotonic() < deadline, info
            time.sleep(0.05)
        assert client.generate(token_ids=[5, 6], max_tokens=2, ignore_eos=True).finish_reason == "length"
    assert stack.scheduler is not None and stack.scheduler.is_running() and stack.executor.is_running()
