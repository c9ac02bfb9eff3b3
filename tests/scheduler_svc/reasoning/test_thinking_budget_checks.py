"""sampling.thinking_token_budget at the scheduler: a budget the executor can apply carries the thinking's markers to
it (with or without a format); one it cannot (no parser, no split, markers not single tokens, gpt-oss, a negative
number, restrictions that forbid the end token) is refused naming the field."""

from __future__ import annotations

import pytest
from test_request_split import CHAT, JSON, step_request
from tiny_tokenizers import build_thinking

from scheduler_svc.reasoning.thinking_bounds import ThinkingBounds, thinking_bounds
from scheduler_svc.request_errors import InvalidRequestError
from scheduler_svc.tokenizer import Tokenizer
from scheduler_svc.validation import ModelLimits, build_request
from stepahead_proto import generation_pb2


@pytest.fixture(scope="module")
def marked(tmp_path_factory) -> Tokenizer:
    """A tokenizer that writes ``<think>`` and ``</think>`` as single tokens."""
    return Tokenizer.from_dir(build_thinking(tmp_path_factory.mktemp("marked"), markers=True))


def limits_for(tokenizer: Tokenizer, parser: str | None = "qwen3",
               bounds: ThinkingBounds | None | str = "derived") -> ModelLimits:
    if bounds == "derived":
        bounds = thinking_bounds(parser, tokenizer) if parser else None
    return ModelLimits("m", 512, tokenizer.vocab_size, frozenset({0}), 16, reasoning_parser=parser,
                       thinking_bounds=bounds)


def budget_request(budget: int = 8, **fields) -> generation_pb2.GenerateRequest:
    pb = generation_pb2.GenerateRequest(chat=CHAT, **fields)
    pb.sampling.thinking_token_budget = budget
    return pb


@pytest.mark.parametrize("constrained", [False, True], ids=["free", "format"])
def test_a_budget_carries_the_markers_and_itself_to_the_executor(marked, constrained):
    pb = budget_request(5)
    if constrained:
        pb.sampling.structured_output.CopyFrom(JSON)
    limits = limits_for(marked)
    built = build_request(pb, marked, limits)
    assert limits.thinking_bounds is not None and built.format_after_thinking == limits.thinking_bounds
    new = step_request(built).new_requests[0]
    assert list(new.format_after_thinking.end_token_ids) == marked.encode("</think>", add_special_tokens=False)
    assert new.sampling.thinking_token_budget == 5
    assert new.sampling.HasField("structured_output") == constrained


def test_a_budget_of_zero_is_served(marked):
    assert build_request(budget_request(0), marked, limits_for(marked)).sampling.thinking_token_budget == 0


def refusal(pb, tokenizer, limits) -> str:
    with pytest.raises(InvalidRequestError) as raised:
        build_request(pb, tokenizer, limits)
    assert raised.value.field == "sampling.thinking_token_budget"
    return str(raised.value)


def test_a_negative_budget_is_refused(marked):
    assert "must be >= 0, got -1" in refusal(budget_request(-1), marked, limits_for(marked))


@pytest.mark.parametrize(("fields", "parser"), [
    ({}, None),  # the server has no parser
    ({"split_reasoning": False}, "qwen3"),  # the request keeps its output whole
])
def test_a_budget_needs_the_thinking_split_off(marked, fields, parser):
    assert "needs the output's thinking split off" in refusal(budget_request(**fields), marked,
                                                               limits_for(marked, parser))


def test_a_text_prompt_may_ask_for_the_split(marked):
    pb = generation_pb2.GenerateRequest(text="Hi", split_reasoning=True)
    pb.sampling.thinking_token_budget = 3
    assert build_request(pb, marked, limits_for(marked)).format_after_thinking is not None
    pb.ClearField("split_reasoning")
    assert "split off" in refusal(pb, marked, limits_for(marked))


def test_markers_that_are_not_single_tokens_cannot_be_counted(tmp_path):
    spelled = Tokenizer.from_dir(build_thinking(tmp_path))
    assert thinking_bounds("qwen3", spelled) is None
    assert "markers as single tokens" in refusal(budget_request(), spelled, limits_for(spelled))


def test_gpt_oss_sets_its_thinking_by_reasoning_effort(marked):
    harmony = ThinkingBounds((7, 8), header_end_token_id=9)
    assert "reasoning_effort" in refusal(budget_request(), marked, limits_for(marked, "openai_gptoss", harmony))


def test_restrictions_must_leave_the_end_token_allowed(marked):
    (end,) = marked.encode("</think>", add_special_tokens=False)
    pb = budget_request()
    pb.sampling.allowed_token_ids.extend([3, 4])
    assert "allowed_token_ids must allow" in refusal(pb, marked, limits_for(marked))
    pb.sampling.allowed_token_ids.append(end)
    assert build_request(pb, marked, limits_for(marked)).format_after_thinking is not None
    banned = budget_request()
    banned.sampling.bad_words.append("</think>")
    assert "bad word forbids" in refusal(banned, marked, limits_for(marked))
