"""Speculative sampling keeps the target's distribution: the joint law of the first two generated
tokens (the second always comes out of a verify step) matches the target's exact law."""

from __future__ import annotations

import pytest
import torch
from stats_helpers import chi_square_p_value
from tiny_models import make_tiny_llama

from executor_svc.config import ExecutorConfig
from executor_svc.rejection_sampler import RejectionSampler
from executor_svc.sampler import DeviceSamplerOutput
from executor_svc.server import build_runner
from stepahead_proto import executor_pb2, sampling_pb2

VOCAB = 8
PROMPT = [1, 2, 3]
NUM_SAMPLES = 20_000
ROUND = 5_000
PREDICTION_TAIL = [5, 1, 6, 0, 2, 7, 4]
"""What a predicted output drafts after its first token (the tests put the target's likeliest first token before it)."""


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


@pytest.fixture(scope="module")
def eagle_dir(checkpoints, tmp_path_factory):
    """A random EAGLE-style head for the target drafting over 5 of its 8 tokens (a reduced vocabulary)."""
    from executor_svc.drafters.eagle_head import EagleHead, EagleHeadConfig, save_head
    from executor_svc.model_loader import load_hf_config

    config = load_hf_config(checkpoints[0])
    head = EagleHead(config, 5)
    head.initialise(3)
    head.draft_vocab.copy_(torch.tensor([6, 1, 3, 0, 4]))
    out = tmp_path_factory.mktemp("eagle")
    save_head(head, EagleHeadConfig.for_target(config, 5), out)
    return out


def sample_first_two(target_dir, drafter_dir, k: int, spec_method: str = "draft_model") -> torch.Tensor:
    """Counts of (t1, t2) over NUM_SAMPLES requests: t1 is sampled after the prompt while K drafts
    are proposed; t2 is the first token the verify step emits. eagle_ngram looks up 1-grams, so a t1 that
    occurs in the prompt gets the lookup's drafts (fewer than K for some) and any other t1 the head's. "prediction":
    no drafter, each request predicts its likeliest t1 then PREDICTION_TAIL: a t1 that follows it gets the tail's first
    K as drafts, any other none."""
    drafter = {"draft_model_dir": str(drafter_dir)} if spec_method == "draft_model" else {"eagle_dir": str(drafter_dir)}
    if spec_method == "eagle_ngram":
        drafter["ngram_min_n"] = 1
    prediction = [int(exact_joint(target_dir).view(VOCAB, VOCAB).sum(1).argmax()), *PREDICTION_TAIL] \
        if spec_method == "prediction" else []
    if prediction:
        spec_method, drafter = "none", {}
    config = ExecutorConfig(model_dir=str(target_dir), spec_method=spec_method, num_spec_tokens=k,
                            num_kv_blocks=ROUND + 4, **drafter)
    runner, _ = build_runner(config)
    counts = torch.zeros(VOCAB * VOCAB)
    for round_index in range(NUM_SAMPLES // ROUND):
        ids = [f"{round_index}-{i}" for i in range(ROUND)]
        prefill = executor_pb2.StepRequest(step_id=0, new_requests=[
            executor_pb2.NewRequestData(request_id=rid, prompt_token_ids=PROMPT, block_ids=[i],
                                        sampling=sampling_pb2.SamplingParams(temperature=1.0, top_p=1.0,
                                                                             seed=round_index * ROUND + i),
                                        num_scheduled_tokens=len(PROMPT), num_spec_tokens=k,
                                        prediction_token_ids=prediction)
            for i, rid in enumerate(ids)])
        first = runner.execute(prefill)
        verify = executor_pb2.StepRequest(step_id=1, cached_requests=[
            executor_pb2.CachedRequestData(request_id=rid, num_computed_tokens=len(PROMPT), num_scheduled_tokens=1,
                                           num_draft_tokens=k) for rid in ids])
        second = runner.execute(verify)
        t1 = torch.tensor([o.token_ids[0] for o in first.outputs])
        t2 = torch.tensor([o.token_ids[0] for o in second.outputs])
        drafted = [o.num_drafted for o in second.outputs]
        if spec_method == "eagle_ngram":  # both sources drafted: the lookup's short drafts and the head's K
            assert 0 < drafted.count(k) < ROUND and min(drafted) < k
        elif prediction:  # drafts where t1 followed the prediction, none elsewhere
            followed = [t == prediction[0] for t in t1.tolist()]
            assert drafted == [k if f else 0 for f in followed] and 0 < sum(followed) < ROUND
            assert [o.drafts_from_prediction for o in second.outputs] == followed
        else:
            assert sum(drafted) == k * ROUND
        counts += torch.bincount(t1 * VOCAB + t2, minlength=VOCAB * VOCAB).float()
        runner.execute(executor_pb2.StepRequest(step_id=2, finished_request_ids=ids))
    return counts


@pytest.mark.parametrize("k", [1, 3])
def test_speculative_sampling_matches_target_distribution(checkpoints, k):
    target, drafter = checkpoints
    counts = sample_first_two(target, drafter, k)
    assert counts.sum() == NUM_SAMPLES
    assert chi_square_p_value(counts, exact_joint(target)) > 0.01


@pytest.mark.parametrize("spec_method", ["eagle", "eagle_ngram"])
def test_eagle_speculative_sampling_matches_target_distribution(checkpoints, eagle_dir, spec_method):
    counts = sample_first_two(checkpoints[0], eagle_dir, 3, spec_method)
    assert counts.sum() == NUM_SAMPLES
    assert chi_square_p_value(counts, exact_joint(checkpoints[0])) > 0.01


@pytest.mark.parametrize("k", [1, 3])
def test_predicted_output_drafts_keep_the_target_distribution(checkpoints, k):
    counts = sample_first_two(checkpoints[0], None, k, "prediction")
    assert counts.sum() == NUM_SAMPLES
    assert chi_square_p_value(counts, exact_joint(checkpoints[0])) > 0.01


def _break_rows(monkeypatch, breakage):
    """Verification as RejectionSampler does it, with ``breakage(sampled, drafts_per_row, probs)``
    rewriting the token each row emits (a row accepts its draft iff the two match)."""

    def broken_sample_rows(self, logits, meta, drafts):
        rows = self.sampler.sample(logits, meta)
        probs = self.sampler.probabilities(self.sampler.processed_logits(logits, meta), meta.sampling)
        per_row = torch.tensor([d for request in drafts for d in [*request, -1]])
        return DeviceSamplerOutput(breakage(rows.token_ids, per_row, probs), rows.logprobs)

    monkeypatch.setattr(RejectionSampler, "sample_rows", broken_sample_rows)


def _accept_too_often(monkeypatch):
    """Acceptance rule broken: a row also takes its draft on an independent 30% coin, so drafts are
    accepted with probability p(d) + 0.3 (1 - p(d)) instead of min(1, p(d) / q(d)) = p(d)."""

    def breakage(sampled, drafts, probs):
        coin = torch.rand(sampled.shape[0]) < 0.3
        return torch.where(coin & (drafts >= 0), drafts, sampled)

    _break_rows(monkeypatch, breakage)


def _resample_from_p(monkeypatch):
    """Recovery rule broken: a rejected row emits a fresh draw from p (which may be the draft again)
    instead of a draw from normalise(max(p - q, 0))."""

    def breakage(sampled, drafts, probs):
        fresh = torch.multinomial(probs, 1).squeeze(1)
        return torch.where((drafts >= 0) & (sampled != drafts), fresh, sampled)

    _break_rows(monkeypatch, breakage)


@pytest.mark.parametrize("breakage", [_accept_too_often, _resample_from_p], ids=["acceptance", "recovery"])
def test_broken_rule_is_detected(checkpoints, monkeypatch, breakage):
    target, drafter = checkpoints
    breakage(monkeypatch)
    counts = sample_first_two(target, drafter, 1)
    assert chi_square_p_value(counts, exact_joint(target)) < 1e-4
