"""Prompt logprobs on the executor: each prefill chunk scores the prompt tokens its rows predict, equal to HF's
log-softmax of the same prompt, whether the prompt is computed in one chunk or several, run ahead or not."""

from __future__ import annotations

import pytest
import torch
from tiny_models import make_tiny_llama

from executor_svc.config import ExecutorConfig
from executor_svc.server import build_runner
from stepahead_proto import executor_pb2, sampling_pb2

PROMPT = [5, 9, 11, 3, 17, 40, 41, 42, 7, 8, 9, 100, 3, 4, 20, 21, 22, 23, 24, 25]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return make_tiny_llama(tmp_path_factory.mktemp("target"), seed=3)


@pytest.fixture(scope="module")
def hf_logprobs(model_dir) -> torch.Tensor:
    """[len(PROMPT) - 1, V]: row i scores prompt token i + 1."""
    from transformers import LlamaForCausalLM

    model = LlamaForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32).eval()
    with torch.no_grad():
        return model(torch.tensor([PROMPT])).logits[0, :-1].log_softmax(-1)


def runner_for(model_dir, defer: bool = False):
    return build_runner(ExecutorConfig(model_dir=str(model_dir), num_kv_blocks=40, defer_token_readback=defer))[0]


def prefill(runner, chunks: list[int], count: int | None, output: list[int] | None = None,
            request_id: str = "r") -> list[executor_pb2.RequestStepOutput]:
    """Computes PROMPT (+ output) in chunks of the given sizes; returns the request's output of each step."""
    sampling = sampling_pb2.SamplingParams(temperature=0.0)
    if count is not None:
        sampling.prompt_logprobs = count
    outputs, done = [], 0
    for index, size in enumerate(chunks):
        step = executor_pb2.StepRequest(step_id=index)
        if index == 0:
            step.new_requests.add(request_id=request_id, prompt_token_ids=PROMPT, output_token_ids=output or [],
                                  sampling=sampling, block_ids=list(range(4)), num_scheduled_tokens=size)
        else:
            step.cached_requests.add(request_id=request_id, num_computed_tokens=done, num_scheduled_tokens=size)
        outputs.append(runner.execute(step).outputs[0])
        done += size
    return outputs


def scored(outputs) -> tuple[list[int], list[executor_pb2.RequestStepOutput]]:
    positions, entries = [], []
    for output in outputs:
        positions += range(output.prompt_logprobs_start, output.prompt_logprobs_start + len(output.prompt_logprobs))
        entries += output.prompt_logprobs
    return positions, entries


def assert_like_hf(entries, hf: torch.Tensor, count: int) -> None:
    assert len(entries) == len(PROMPT) - 1
    for index, entry in enumerate(entries):
        token = PROMPT[index + 1]
        assert entry.sampled.token_id == token
        assert entry.sampled.logprob == pytest.approx(hf[index, token].item(), abs=1e-4)
        top = hf[index].topk(count)
        assert [t.token_id for t in entry.top] == top.indices.tolist()
        assert [t.logprob for t in entry.top] == pytest.approx(top.values.tolist(), abs=1e-4)


@pytest.mark.parametrize("chunks", [[20], [7, 7, 6], [1, 18, 1], [19, 1]], ids=str)
def test_every_prompt_token_after_the_first_is_scored_once_as_hf_scores_it(model_dir, hf_logprobs, chunks):
    outputs = prefill(runner_for(model_dir), chunks, count=3)
    positions, entries = scored(outputs)
    assert positions == list(range(1, len(PROMPT)))
    assert_like_hf(entries, hf_logprobs, 3)
    assert len(outputs[-1].token_ids) == 1  # the last chunk still samples the first output token


def test_without_the_parameter_nothing_is_scored_and_zero_alternatives_gives_the_own_token_only(model_dir):
    assert scored(prefill(runner_for(model_dir), [20], count=None))[1] == []
    entries = scored(prefill(runner_for(model_dir), [20], count=0))[1]
    assert len(entries) == len(PROMPT) - 1 and all(not entry.top for entry in entries)


def test_a_resumed_request_scores_its_prompt_again_but_not_its_outputs(model_dir, hf_logprobs):
    outputs = prefill(runner_for(model_dir), [12, 11], count=2, output=[30, 31, 32])
    positions, entries = scored(outputs)
    assert positions == list(range(1, len(PROMPT)))
    assert_like_hf(entries, hf_logprobs, 2)


def test_a_scoring_step_is_not_deferred_and_the_scores_are_the_same(model_dir, hf_logprobs):
    runner = runner_for(model_dir, defer=True)
    plain = executor_pb2.StepRequest(step_id=0)
    plain.new_requests.add(request_id="other", prompt_token_ids=[1, 2, 3], block_ids=[10], num_scheduled_tokens=3,
                           sampling=sampling_pb2.SamplingParams(temperature=0.0))
    runner.launch(plain)  # deferred: its token stays on the device
    assert runner.requests["other"].num_unread_tokens == 1
    outputs = prefill(runner, [10, 10], count=1)
    assert runner.requests["other"].num_unread_tokens == 0  # scoring settled the earlier step first
    assert_like_hf(scored(outputs)[1], hf_logprobs, 1)


def test_one_token_chunks_score_from_replayed_graphs_as_hf(model_dir, hf_logprobs):
    """One-token prefill chunks replay the decode graphs (a CPU stand-in here): their prompt rows are read from the
    replayed step's logits."""
    from executor_svc.cuda_graphs.step_graphs import EagerStandIn

    config = ExecutorConfig(model_dir=str(model_dir), num_kv_blocks=40, attention_backend="torch_padded",
                            max_num_seqs=4)
    runner = build_runner(config, make_capture=EagerStandIn)[0]
    outputs = prefill(runner, [1] * len(PROMPT), count=2)
    assert runner.forward.num_replays > 0
    assert_like_hf(scored(outputs)[1], hf_logprobs, 2)
