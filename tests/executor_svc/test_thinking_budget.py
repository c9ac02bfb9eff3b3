"""A thinking budget (sampling.thinking_token_budget) through the model runner: the output thinks freely for that many
tokens, then the tokens that end the thinking are forced and the model answers; whole greedy generations equal an
independent HF reference (its forward, argmax, the end token forced at the budget, a matcher over the answer), with
and without a format, openers, speculation, and resumed anywhere."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from constrained_runs import (
    EOS,
    REGEX,
    VOCAB,
    allowed_of,
    build_constrained_model,
    decode,
    fresh_matcher,
    generate,
    llg_tokenizer_of,
    runner_for,
)
from step_plans import PlannedRequest, plan_steps

from executor_svc.model_runner import StepError
from stepahead_proto import executor_pb2, sampling_pb2

SO = sampling_pb2.StructuredOutput
PROMPT = [5, 9, 11, 3, 17, 40, 41]
END = 300
"""The id standing for ``</think>`` (the tiny model's free greedy output never writes it early: checked)."""
GREEDY = sampling_pb2.SamplingParams(temperature=0.0)


def budgeted(sampling: sampling_pb2.SamplingParams, budget: int) -> sampling_pb2.SamplingParams:
    params = sampling_pb2.SamplingParams()
    params.CopyFrom(sampling)
    params.thinking_token_budget = budget
    return params


def bounds(end: int = END, openers: list[int] = ()) -> executor_pb2.FormatAfterThinking:
    return executor_pb2.FormatAfterThinking(end_token_ids=[end], opener_token_ids=openers)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    return build_constrained_model(tmp_path_factory.mktemp("thinking_budget"))


@pytest.fixture(scope="module")
def hf_model(model_dir):
    from transformers import LlamaForCausalLM

    return LlamaForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32).eval()


@pytest.fixture(scope="module")
def free_greedy(model_dir) -> list[int]:
    tokens = generate(runner_for(model_dir)[0], PROMPT, GREEDY, max_tokens=12)
    assert END not in tokens and EOS not in tokens[:8]
    return tokens


def hf_reference(hf_model, prompt: list[int], budget: int, max_tokens: int, openers: list[int] = (),
                 matcher=None, end: int = END) -> list[int]:
    """HF's forward, argmax, walked independently of the executor: the first token opens thinking if it is an opener
    (without openers the output starts thinking); after ``budget`` thinking tokens ``end`` is forced; once the
    thinking ended, ``matcher`` (if any) masks the answer."""
    phase, thought, tokens = ("deciding" if openers else "thinking"), 0, []
    with torch.no_grad():
        while len(tokens) < max_tokens and (not tokens or tokens[-1] != EOS):
            logits = hf_model(torch.tensor([prompt + tokens])).logits[0, -1]
            if phase == "thinking" and thought >= budget:
                token = end
            else:
                allowed = torch.ones(VOCAB, dtype=torch.bool)
                if matcher is not None and phase != "thinking":
                    allowed = torch.from_numpy(allowed_of(matcher))
                if phase == "deciding":
                    allowed[list(openers)] = True
                token = int(logits.masked_fill(~allowed, float("-inf")).argmax())
            tokens.append(token)
            answer_token = phase == "answering" or (phase == "deciding" and token not in openers)
            if phase == "deciding":
                phase = "thinking" if token in openers else "answering"
            elif phase == "thinking":
                phase, thought = ("answering", thought) if token == end else ("thinking", thought + 1)
            if answer_token and matcher is not None:
                assert matcher.consume_token(token)
    return tokens


@pytest.mark.parametrize("budget", [0, 1, 4])
def test_greedy_thinks_its_budget_then_ends_the_thinking_as_hf(model_dir, hf_model, free_greedy, budget):
    tokens = generate(runner_for(model_dir)[0], PROMPT, budgeted(GREEDY, budget), max_tokens=14,
                      format_after_thinking=bounds())
    assert tokens == hf_reference(hf_model, PROMPT, budget, max_tokens=14)
    assert tokens[:budget] == free_greedy[:budget] and tokens[budget] == END


@pytest.mark.parametrize("opens", [True, False], ids=["opens", "answers"])
def test_the_budget_counts_from_the_opener_and_an_answer_without_thinking_is_free(model_dir, hf_model, free_greedy,
                                                                                  opens):
    openers = [free_greedy[0]] if opens else [END + 1]
    tokens = generate(runner_for(model_dir)[0], PROMPT, budgeted(GREEDY, 2), max_tokens=12,
                      format_after_thinking=bounds(openers=openers))
    assert tokens == hf_reference(hf_model, PROMPT, 2, max_tokens=12, openers=openers)
    assert tokens == (free_greedy[:3] + [END] + tokens[4:] if opens else free_greedy[:12])


def test_a_budget_the_thinking_stays_within_changes_nothing(model_dir, free_greedy):
    natural_end = free_greedy[2]  # the thinking ends by itself at its third token
    tokens = generate(runner_for(model_dir)[0], PROMPT, budgeted(GREEDY, 3), max_tokens=12,
                      format_after_thinking=bounds(end=natural_end))
    assert tokens == free_greedy[:12]


def test_with_a_format_the_forced_end_starts_the_formatted_answer(model_dir, hf_model, free_greedy):
    constrained = budgeted(sampling_pb2.SamplingParams(temperature=0.0, structured_output=SO(regex=REGEX)), 2)
    tokens = generate(runner_for(model_dir)[0], PROMPT, constrained, max_tokens=40, format_after_thinking=bounds())
    matcher = fresh_matcher(llg_tokenizer_of(model_dir), SO(regex=REGEX))
    assert tokens == hf_reference(hf_model, PROMPT, 2, max_tokens=40, matcher=matcher)
    assert tokens[:3] == [*free_greedy[:2], END]
    assert tokens[-1] == EOS and re.fullmatch(REGEX, decode(model_dir, tokens[3:-1]))


@pytest.mark.parametrize("cut", [1, 3, 4, 6])
def test_a_resumed_request_keeps_its_thinking_count(model_dir, cut):
    """Resumed inside the thinking, right at the budget, and after the forced end: the same output."""
    whole = generate(runner_for(model_dir)[0], PROMPT, budgeted(GREEDY, 3), max_tokens=12,
                     format_after_thinking=bounds())
    resumed = generate(runner_for(model_dir)[0], PROMPT, budgeted(GREEDY, 3), max_tokens=12 - cut,
                       output=whole[:cut], format_after_thinking=bounds())
    assert whole[:cut] + resumed == whole


def test_speculation_across_the_forced_end_keeps_the_output(model_dir):
    prompt = PROMPT + PROMPT  # the n-gram drafter finds matches in a repeated prompt
    sampling = budgeted(GREEDY, 3)
    expected = generate(runner_for(model_dir)[0], prompt, sampling, max_tokens=16, format_after_thinking=bounds())
    runner, _ = runner_for(model_dir, spec_method="ngram", num_spec_tokens=3)
    planned = PlannedRequest(prompt, sampling, num_spec=3, block_ids=list(range(8)), format_after_thinking=bounds())
    outputs = [o for step in plan_steps({"r": planned}, [["r"]] * 8) for o in runner.execute(step).outputs]
    emitted = [t for o in outputs for t in o.token_ids]
    assert sum(o.num_drafted for o in outputs) > 0
    assert len(emitted) >= 8 and emitted == expected[:len(emitted)]
    assert expected[3] == END


def test_sampled_rows_are_forced_too(model_dir):
    sampling = budgeted(sampling_pb2.SamplingParams(temperature=1.0, seed=7), 4)
    tokens = generate(runner_for(model_dir)[0], PROMPT, sampling, max_tokens=10, format_after_thinking=bounds())
    assert END not in tokens[:4] and tokens[4] == END


def test_without_a_format_the_phases_are_dropped_once_the_answer_starts(model_dir):
    """From the answer on nothing is restricted: the request's steps may run ahead again (no host copy needed)."""
    runner, _ = runner_for(model_dir)
    generate(runner, PROMPT, budgeted(GREEDY, 2), max_tokens=4, format_after_thinking=bounds())
    assert runner.requests["r"].grammar is None
    runner, _ = runner_for(model_dir)
    generate(runner, PROMPT, budgeted(GREEDY, 2), max_tokens=2, format_after_thinking=bounds())
    assert runner.requests["r"].grammar is not None  # still thinking: the next row is forced


@pytest.mark.parametrize(("budget", "after", "problem"), [
    (2, None, "sampling.thinking_token_budget needs format_after_thinking"),
    (-1, bounds(), "sampling.thinking_token_budget: -1; at least 0"),
    (2, executor_pb2.FormatAfterThinking(end_token_ids=[VOCAB]),
     f"format_after_thinking: token id {VOCAB} is outside the vocabulary"),
])
def test_bad_budgets_are_refused_by_name(model_dir, budget, after, problem):
    runner, _ = runner_for(model_dir)
    request = {"format_after_thinking": after} if after is not None else {}
    with pytest.raises(StepError, match=re.escape(f"'r' {problem}")):
        generate(runner, PROMPT, budgeted(GREEDY, budget), max_tokens=2, **request)
