"""Whose output the server's --reasoning-parser splits: chat prompts by default, any prompt that asks; one with a
structured output only where the format can wait for the thinking (the markers are tokens of the model), and then the
request carries the markers to the executor; a split no parser can make is refused naming split_reasoning; a split
output keeps its special tokens unless the request drops them."""

from __future__ import annotations

import pytest
from tiny_tokenizers import build_thinking

from scheduler_svc.reasoning.request_split import splitting_parser
from scheduler_svc.reasoning.thinking_bounds import ThinkingBounds, thinking_bounds
from scheduler_svc.request_errors import InvalidRequestError
from scheduler_svc.scheduler_output import ScheduledNewRequest, SchedulerOutput
from scheduler_svc.step_codec import to_step_request
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


BOUNDS = ThinkingBounds((401,), (400,))


@pytest.mark.parametrize(("pb", "parser"), [
    (request(constrained=True), "qwen3"),
    (request(split=True, constrained=True), "qwen3"),
    (request(split=True, chat=False, constrained=True), "qwen3"),
    (request(chat=False, constrained=True), None),
    (request(split=False, constrained=True), None),  # the format constrains the whole output
])
def test_a_format_that_can_wait_for_the_thinking_is_split_too(pb, parser):
    assert splitting_parser(pb, "qwen3", BOUNDS) == parser


@pytest.mark.parametrize(("pb", "server", "bounds", "why"), [
    (request(split=True), None, None, "no --reasoning-parser"),
    (request(split=True, constrained=True), None, BOUNDS, "no --reasoning-parser"),
    (request(split=True, constrained=True), "qwen3", None,
     "does not write the qwen3 parser's thinking markers as single tokens, so sampling.structured_output cannot wait"),
])
def test_a_split_that_cannot_be_made_is_refused_naming_the_field(pb, server, bounds, why):
    with pytest.raises(InvalidRequestError, match=why) as raised:
        splitting_parser(pb, server, bounds)
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


@pytest.mark.parametrize(("pb", "carries"), [
    (request(constrained=True), True),
    (request(), False),  # free text: nothing to wait for
    (request(split=False, constrained=True), False),
])
def test_a_split_format_carries_the_markers_to_the_executor(tmp_path, pb, carries):
    marked = Tokenizer.from_dir(build_thinking(tmp_path, markers=True))
    bounds = thinking_bounds("qwen3", marked)
    limits = ModelLimits("m", 512, marked.vocab_size, frozenset({0}), 16, reasoning_parser="qwen3",
                         thinking_bounds=bounds)
    built = build_request(pb, marked, limits)
    assert bounds is not None and built.format_after_thinking == (bounds if carries else None)
    new = step_request(built).new_requests[0]
    assert new.HasField("format_after_thinking") == carries
    if carries:
        assert (list(new.format_after_thinking.end_token_ids), list(new.format_after_thinking.opener_token_ids)) == (
            marked.encode("</think>", add_special_tokens=False), marked.encode("<think>", add_special_tokens=False))


def step_request(built):
    """The StepRequest that first schedules ``built`` (a prefill of its whole prompt)."""
    scheduled = ScheduledNewRequest(request=built, block_ids=[0], num_computed_tokens=0,
                                    num_scheduled_tokens=len(built.prompt_token_ids), num_spec_tokens=0)
    return to_step_request(SchedulerOutput(step_id=1, new_requests=[scheduled]), max_model_len=512)
