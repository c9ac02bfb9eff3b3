"""Which gRPC requests' outputs are parsed for tool calls (GenerateRequest.parse_tool_calls): chat prompts with tools
by default on a server with --tool-call-parser, on request otherwise; impossible parsing and parallel_tool_calls
without parsing are refused naming the field."""

from __future__ import annotations

import json

import pytest
from tiny_tokenizers import build_tool_calling

from scheduler_svc.tokenizer import Tokenizer
from scheduler_svc.tool_calls.request_parsing import ToolCallParsing
from scheduler_svc.validation import InvalidRequestError, ModelLimits, build_request
from stepahead_proto import generation_pb2

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}},
         {"type": "function", "function": {"name": "get_time"}}]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory) -> Tokenizer:
    return Tokenizer.from_dir(build_tool_calling(tmp_path_factory.mktemp("tools")))


def limits(tokenizer: Tokenizer, parser: str | None = "hermes", reasoning: str | None = None) -> ModelLimits:
    return ModelLimits("tiny", 512, tokenizer.vocab_size, frozenset({2}), 16, tool_call_parser=parser,
                       reasoning_parser=reasoning)


def chat_request(tools: object = TOOLS, **fields) -> generation_pb2.GenerateRequest:
    chat = generation_pb2.ChatPrompt(messages=[generation_pb2.ChatMessage(role="user", content="Weather?")],
                                     tools_json=tools if isinstance(tools, str) else json.dumps(tools))
    return generation_pb2.GenerateRequest(chat=chat, **fields)


def refused(pb: generation_pb2.GenerateRequest, limits: ModelLimits, tokenizer: Tokenizer) -> InvalidRequestError:
    with pytest.raises(InvalidRequestError) as caught:
        build_request(pb, tokenizer, limits)
    return caught.value


def test_a_chat_with_tools_is_parsed_by_default_keeping_special_tokens(tokenizer):
    request = build_request(chat_request(), tokenizer, limits(tokenizer))
    assert request.tool_call_parsing == ToolCallParsing("hermes", frozenset({"get_weather", "get_time"}), True)
    assert not request.stop_params.skip_special_tokens  # a call's markers may be special tokens
    kept = build_request(chat_request(skip_special_tokens=True), tokenizer, limits(tokenizer))
    assert kept.tool_call_parsing is not None and kept.stop_params.skip_special_tokens


@pytest.mark.parametrize("pb, parser", [
    (chat_request(tools=[]), "hermes"),  # no tools
    (chat_request(), None),  # no parser on the server
    (chat_request(parse_tool_calls=False), "hermes"),  # asked not to
    (generation_pb2.GenerateRequest(text="Weather?"), "hermes"),  # not a chat
], ids=["no-tools", "no-parser", "false", "text-prompt"])
def test_outputs_that_are_not_parsed(pb, parser, tokenizer):
    request = build_request(pb, tokenizer, limits(tokenizer, parser))
    assert request.tool_call_parsing is None and request.stop_params.skip_special_tokens


def test_parallel_tool_calls_false_keeps_the_first_call_only(tokenizer):
    request = build_request(chat_request(parallel_tool_calls=False), tokenizer, limits(tokenizer, "pythonic"))
    assert request.tool_call_parsing == ToolCallParsing("pythonic", frozenset({"get_weather", "get_time"}), False)


def test_bare_tool_objects_are_named_too(tokenizer):
    pb = chat_request(tools=[{"name": "lookup", "parameters": {}}, {"type": "function", "function": {}}],
                      parse_tool_calls=True)
    parsing = build_request(pb, tokenizer, limits(tokenizer)).tool_call_parsing
    assert parsing is not None and parsing.names == frozenset({"lookup"})


@pytest.mark.parametrize("pb, parser, field, words", [
    (chat_request(parse_tool_calls=True), None, "parse_tool_calls", "no --tool-call-parser"),
    (chat_request(tools=[], parse_tool_calls=True), "hermes", "parse_tool_calls", "chat.tools_json"),
    (chat_request(tools=[{"type": "function", "function": {}}], parse_tool_calls=True), "hermes",
     "parse_tool_calls", "names at least one function"),
    (generation_pb2.GenerateRequest(text="Hi", parse_tool_calls=True), "hermes", "parse_tool_calls",
     "chat.tools_json"),
    (chat_request(parse_tool_calls=True), "openai", "parse_tool_calls", "split_reasoning"),
    (chat_request(parse_tool_calls=False, parallel_tool_calls=True), "hermes", "parallel_tool_calls",
     "parse_tool_calls"),
    (chat_request(tools=[], parallel_tool_calls=False), "hermes", "parallel_tool_calls", "parse_tool_calls"),
], ids=["no-parser", "no-tools", "unnamed-tools", "text-prompt", "harmony-unsplit", "parallel-unparsed",
        "parallel-without-tools"])
def test_impossible_parsing_is_refused_naming_the_field(pb, parser, field, words, tokenizer):
    error = refused(pb, limits(tokenizer, parser), tokenizer)
    assert error.field == field and words in error.reason


def test_the_harmony_parser_reads_split_outputs_only(tokenizer):
    unsplit = build_request(chat_request(), tokenizer, limits(tokenizer, "openai"))
    assert unsplit.tool_call_parsing is None  # its messages are handed on by the openai_gptoss split
    split = build_request(chat_request(), tokenizer, limits(tokenizer, "openai", reasoning="openai_gptoss"))
    assert split.reasoning_parser == "openai_gptoss"
    assert split.tool_call_parsing == ToolCallParsing("openai", frozenset({"get_weather", "get_time"}), True)
    kept_whole = chat_request(split_reasoning=False)
    assert build_request(kept_whole, tokenizer, limits(tokenizer, "openai", "openai_gptoss")).tool_call_parsing is None
