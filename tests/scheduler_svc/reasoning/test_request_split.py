"""Whose output the server's --reasoning-parser splits: chat prompts by default, any prompt that asks, none that
sets a structured output; a split no parser can make is refused naming split_reasoning; a split output keeps its
special tokens unless the request drops them."""

from __future__ import annotations

import pytest
from tiny_tokenizers import build_thinking

from scheduler_svc.reasoning.request_split import splitting_parser
from scheduler_svc.request_errors import InvalidRequestError
from scheduler_svc.tokenizer import Tokenizer
from scheduler_svc.validation import ModelLimits, build_request
from stepahead_proto import generation_pb2, sampling_pb2

CHAT = generation_pb2.ChatPrompt(messages=[generation_pb2.ChatMessage(role="user", content="Hi")])
JSON = sampling_pb2.StructuredOutput(json_object=True)


def request(split: bool | None = None, chat: bool = True, constrained: bool = False) -> generation_pb2.GenerateRequest:
    pb = generation_pb2.GenerateRequest(chat=CHAT) if chat else generation_pb2.GenerateRequest(text="Hi")
    if split is not None:
        pb.split_reasoning = split
    if constrained:
        pb.sampling.structured_output.CopyFrom(JSON)
    return pb


@pytest.mark.parametrize(("pb", "server", "parser"), [
    (request(), "qwen3", "qwen3"),
    (request(), None, None),
    (request(chat=False), "qwen3", None),
    (request(constrained=True), "deepseek_r1", None),
    (request(split=True, chat=False), "deepseek_r1", "deepseek_r1"),
    (request(split=False), "qwen3", None),
    (request(split=False), None, None),
    (request(split=False, constrained=True), "qwen3", None),
])
def test_the_default_splits_free_chat_outputs_and_a_request_may_choose(pb, server, parser):
    assert splitting_parser(pb, server) == parser


@pytest.mark.parametrize(("pb", "server", "why"), [
    (request(split=True), None, "no --reasoning-parser"),
    (request(split=True, constrained=True), "qwen3", "structured_output"),
])
def test_a_split_that_cannot_be_made_is_refused_naming_the_field(pb, server, why):
    with pytest.raises(InvalidRequestError, match=why) as raised:
        splitting_parser(pb, server)
    assert raised.value.field == "split_reasoning"


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory) -> Tokenizer:
    return Tokenizer.from_dir(build_thinking(tmp_path_factory.mktemp("thinking")))


@pytest.mark.parametrize(("pb", "skip", "parser"), [
    (request(), False, "qwen3"),  # the markers may be special tokens: kept while the parser reads
    (request(chat=False), True, None),
    (request(split=False), True, None),
])
def test_a_split_request_keeps_special_tokens_unless_it_says(tokenizer, pb, skip, parser):
    limits = ModelLimits("m", 512, tokenizer.vocab_size, frozenset({0}), 16, reasoning_parser="qwen3")
    built = build_request(pb, tokenizer, limits)
    assert (built.stop_params.skip_special_tokens, built.reasoning_parser) == (skip, parser)
    pb.skip_special_tokens = True
    assert build_request(pb, tokenizer, limits).stop_params.skip_special_tokens
