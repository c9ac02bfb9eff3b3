"""Tests of the per-request logit bias: its tensors, where the sampler applies it, and its checks."""

from __future__ import annotations

import pytest
import torch

from executor_svc.logit_bias import apply_logit_bias, bias_pairs, build_logit_bias
from executor_svc.sampler import Sampler
from executor_svc.sampling_metadata import RowSamplingParams, SamplingMetadata
from stepahead_proto import sampling_pb2

VOCAB = 64
P = RowSamplingParams


def build(params, outputs=None):
    outputs = outputs or [[] for _ in params]
    return SamplingMetadata.build(params, [[] for _ in params], outputs, VOCAB, "cpu")


def logits(rows: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(rows, VOCAB, generator=torch.Generator().manual_seed(seed))


def test_no_bias_builds_nothing_and_the_sampler_leaves_logits_alone():
    assert build_logit_bias([P(), P()], VOCAB, "cpu") is None
    x = logits(2)
    assert Sampler().processed_logits(x, build([P(), P()])) is x


def test_each_row_gets_only_its_own_bias_and_the_input_is_untouched():
    x = logits(3)
    original = x.clone()
    bias = build_logit_bias([P(logit_bias=((1, 2.5), (7, -1.0))), P(), P(logit_bias=((1, -4.0),))], VOCAB, "cpu")
    out = apply_logit_bias(x, bias)
    expected = original.clone()
    expected[0, 1] += 2.5
    expected[0, 7] -= 1.0
    expected[2, 1] -= 4.0
    assert torch.equal(out, expected) and torch.equal(x, original)


def test_bias_is_added_in_float32_to_half_precision_logits():
    x = torch.full((1, VOCAB), 0.1, dtype=torch.bfloat16)
    out = apply_logit_bias(x, build_logit_bias([P(logit_bias=((3, 100.0),))], VOCAB, "cpu"))
    assert out.dtype == torch.bfloat16 and out[0, 3].item() == pytest.approx(100.1, abs=0.5)


def test_greedy_rows_obey_a_ban_and_a_force():
    x = logits(2, seed=3)
    top = int(x[0].argmax())
    meta = build([P(temperature=0.0, logit_bias=((top, -100.0),)), P(temperature=0.0, logit_bias=((5, 100.0),))])
    tokens = Sampler().sample(x, meta).token_ids.tolist()
    assert tokens[0] == int(x[0].clone().index_fill_(0, torch.tensor([top]), -1e9).argmax())
    assert tokens[1] == 5


def test_sampling_rows_never_draw_a_banned_token_and_follow_the_biased_distribution():
    row = torch.zeros(VOCAB)
    banned = list(range(0, VOCAB, 2))
    params = P(temperature=1.0, seed=None, logit_bias=tuple((t, -100.0) for t in banned) + ((1, 1.0),))
    sampler = Sampler(seed=7)
    meta = build([params] * 400)
    counts = torch.zeros(VOCAB)
    for _ in range(10):
        counts += torch.bincount(sampler.sample(row.expand(400, -1).contiguous(), meta).token_ids, minlength=VOCAB)
    assert counts[banned].sum() == 0
    # Token 1 has logit 1 against 0 for the 31 other allowed tokens: probability e / (e + 31) ~ 0.081.
    assert counts[1] / counts.sum() == pytest.approx(torch.e / (torch.e + 31), abs=0.02)


def test_bias_comes_before_the_penalties():
    x = torch.zeros(1, VOCAB)
    x[0, 4] = 1.0
    params = P(temperature=0.0, repetition_penalty=2.0, logit_bias=((4, 3.0),))
    processed = Sampler().processed_logits(x, build([params], outputs=[[4]]))
    assert processed[0, 4].item() == pytest.approx((1.0 + 3.0) / 2.0)


def test_logprobs_stay_those_of_the_raw_logits():
    x = logits(1, seed=5)
    meta = build([P(temperature=0.0, logprobs=2, logit_bias=((9, 100.0),))])
    out = Sampler().sample(x, meta)
    assert out.token_ids.tolist() == [9]
    assert out.logprobs.sampled.item() == pytest.approx(float(x[0].log_softmax(-1)[9]), abs=1e-5)


def test_params_from_proto_keep_sorted_pairs_and_check_values():
    pb = sampling_pb2.SamplingParams(logit_bias={9: -1.5, 2: 100.0})
    assert P.from_proto(pb).logit_bias == ((2, 100.0), (9, -1.5))
    assert bias_pairs(None) == () and bias_pairs({3: 1}) == ((3, 1.0),)
    for bad in (((1, 100.5),), ((1, float("nan")),), ((-1, 1.0),)):
        with pytest.raises(ValueError, match="logit_bias"):
            P(logit_bias=bad)


def test_a_token_outside_the_vocabulary_is_refused_when_tensors_are_built():
    with pytest.raises(ValueError, match="logit_bias: token id 64 is outside the vocabulary"):
        build_logit_bias([P(logit_bias=((64, 1.0),))], VOCAB, "cpu")
