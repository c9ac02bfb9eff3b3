"""Speculative sampling keeps the target's distribution: the joint law of the first two generated
tokens (the second always comes out of a verify step) matches the target's exact law."""

from __future__ import annotations

import pytest
import torch
from stepahead_proto import executor_pb2, sampling_pb2

from executor_svc.config import ExecutorConfig
from executor_svc import rejection_sampler
from executor_svc.rejection_sampler import RejectionSampler
from executor_svc.server import build_runner
from stats_helpers import chi_square_p_value
from tiny_models import make_tiny_llama

VOCAB = 8
PROMPT = [1, 2, 3]
NUM_SAMPLES = 20_000
ROUND = 5_000


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    target = make_tiny_llama(tmp_path_factory.mktemp("target"), seed=0, vocab_size=VOCAB)
    drafter = make_tiny_llama(tmp_path_factory.mktemp("drafter"), seed=5, vocab_size=VOCAB)
    return target, drafter


def exact_joint(target_dir) -> torch.Tensor:
    """P(t1, t2) under the target at temperature 1, from HF transformers."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(target_dir, dtype=torch.float32).eval()
    with torch.inference_mode():
        p1 = model(torch.tensor([PROMPT])).logits[0, -1].softmax(-1)
        rows = torch.tensor([PROMPT + [t] for t in range(VOCAB)])
        p2 = model(rows).logits[:, -1].softmax(-1)
    return (p1[:, None] * p2).flatten()


def sample_first_two(target_dir, drafter_dir, k: int) -> torch.Tensor:
    """Counts of (t1, t2) over NUM_SAMPLES requests: t1 is sampled after the prompt while K drafts
    are proposed; t2 is the first token the verify step emits."""
    config = ExecutorConfig(model_dir=str(target_dir), spec_method="draft_model", draft_model_dir=str(drafter_dir),
                            num_spec_tokens=k, num_kv_blocks=ROUND + 4)
    runner, _ = build_runner(config)
    counts = torch.zeros(VOCAB * VOCAB)
    for round_index in range(NUM_SAMPLES // ROUND):
        ids = [f"{round_index}-{i}" for i in range(ROUND)]
        prefill = executor_pb2.StepRequest(step_id=0, new_requests=[
            executor_pb2.NewRequestData(request_id=rid, prompt_token_ids=PROMPT, block_ids=[i],
                                        sampling=sampling_pb2.SamplingParams(temperature=1.0, top_p=1.0,
                                                                             seed=round_index * ROUND + i),
                                        num_scheduled_tokens=len(PROMPT), num_spec_tokens=k)
            for i, rid in enumerate(ids)])
        first = runner.execute(prefill)
        verify = executor_pb2.StepRequest(step_id=1, cached_requests=[
            executor_pb2.CachedRequestData(request_id=rid, num_computed_tokens=len(PROMPT), num_scheduled_tokens=1,
                                           num_draft_tokens=k) for rid in ids])
        second = runner.execute(verify)
        t1 = torch.tensor([o.token_ids[0] for o in first.outputs])
        t2 = torch.tensor([o.token_ids[0] for o in second.outputs])
        assert sum(o.num_drafted for o in second.outputs) == k * ROUND
        counts += torch.bincount(t1 * VOCAB + t2, minlength=VOCAB * VOCAB).float()
        runner.execute(executor_pb2.StepRequest(step_id=2, finished_request_ids=ids))
    return counts


@pytest.mark.parametrize("k", [1, 3])
def test_speculative_sampling_matches_target_distribution(checkpoints, k):
    target, drafter = checkpoints
    counts = sample_first_two(target, drafter, k)
    assert counts.sum() == NUM_SAMPLES
    assert chi_square_p_value(counts, exact_joint(target)) > 0.01


def _accept_with_sqrt_p(monkeypatch):
    """Acceptance rule broken: accept when u < sqrt(p(d)) instead of u < min(1, p(d) / q(d))."""
    original = rejection_sampler._uniform
    monkeypatch.setattr(rejection_sampler, "_uniform", lambda *args: original(*args) ** 2)


def _resample_from_p(monkeypatch):
    """Recovery rule broken: after a rejection draw from p instead of normalise(max(p - q, 0))."""
    original = RejectionSampler._sample_rows

    def keep_draft_in_residual(self, probs, greedy, meta, drafts, row_seeds):
        sampled, _ = original(self, probs, greedy, meta, [[-1] * len(d) for d in drafts], row_seeds)
        return sampled, original(self, probs, greedy, meta, drafts, row_seeds)[1]

    monkeypatch.setattr(RejectionSampler, "_sample_rows", keep_draft_in_residual)


@pytest.mark.parametrize("breakage", [_accept_with_sqrt_p, _resample_from_p], ids=["acceptance", "recovery"])
def test_broken_rule_is_detected(checkpoints, monkeypatch, breakage):
    target, drafter = checkpoints
    breakage(monkeypatch)
    counts = sample_first_two(target, drafter, 1)
    assert chi_square_p_value(counts, exact_joint(target)) < 1e-4
