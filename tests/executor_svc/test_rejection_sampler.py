"""Rejection sampler: all accepted + bonus, first rejected, mixed batch, K = 0 rows, seeded determinism."""

from __future__ import annotations

import torch

from executor_svc.rejection_sampler import RejectionSampler
from executor_svc.sampler import Sampler
from executor_svc.sampling_metadata import RowSamplingParams, SamplingMetadata, mix_seed

VOCAB = 6


def metadata(params: list[RowSamplingParams]) -> SamplingMetadata:
    return SamplingMetadata.build(params, [[0]] * len(params), [[]] * len(params), VOCAB, "cpu")


def one_hot_logits(tokens: list[int], strength: float = 30.0) -> torch.Tensor:
    logits = torch.zeros(len(tokens), VOCAB)
    logits[range(len(tokens)), tokens] = strength
    return logits


GREEDY = RowSamplingParams(temperature=0.0)


def test_greedy_all_accepted_gives_bonus():
    sampler = RejectionSampler(Sampler(seed=0))
    logits = one_hot_logits([3, 4, 5, 1])  # target argmax per row
    result = sampler(logits, metadata([GREEDY] * 4), [[3, 4, 5]], [None] * 4)
    assert result.num_accepted == [3] and result.token_ids == [[3, 4, 5, 1]]


def test_greedy_first_rejected_emits_target_token():
    sampler = RejectionSampler(Sampler(seed=0))
    logits = one_hot_logits([3, 4, 5, 1])
    result = sampler(logits, metadata([GREEDY] * 4), [[2, 4, 5]], [None] * 4)
    assert result.num_accepted == [0] and result.token_ids == [[3]]


def test_mixed_batch_with_k0_rows_and_padding():
    sampler = RejectionSampler(Sampler(seed=0))
    # request a: K=2 (second draft wrong); request b: K=0; request c: K=2 with a padded slot.
    logits = one_hot_logits([1, 2, 3, 4, 5, 0, 2])
    drafts = [[1, 5], [], [5, -1]]
    result = sampler(logits, metadata([GREEDY] * 7), drafts, [None] * 7)
    assert result.token_ids == [[1, 2], [4], [5, 0]]
    assert result.num_accepted == [1, 0, 1]


def test_sampling_accepts_certain_drafts_and_rejects_impossible_ones():
    sampler = RejectionSampler(Sampler(seed=0))
    params = [RowSamplingParams(temperature=1.0)] * 3
    logits = one_hot_logits([2, 3, 4], strength=60.0)  # p is (numerically) one-hot
    accepted = sampler(logits, metadata(params), [[2, 3]], [None] * 3)
    assert accepted.token_ids == [[2, 3, 4]] and accepted.num_accepted == [2]
    rejected = sampler(logits, metadata(params), [[1, 3]], [None] * 3)
    assert rejected.num_accepted == [0] and rejected.token_ids == [[2]]


def test_seeded_verification_is_deterministic_and_seed_dependent():
    torch.manual_seed(0)
    logits = torch.randn(4, VOCAB)
    params = [RowSamplingParams(temperature=1.0, seed=7)] * 4
    seeds = [mix_seed(7, j) for j in range(4)]
    runs = [RejectionSampler(Sampler())(logits, metadata(params), [[0, 1, 2]], seeds).token_ids for _ in range(3)]
    assert runs[0] == runs[1] == runs[2]
    outcomes = set()
    for seed in range(40):
        seeded = [RowSamplingParams(temperature=1.0, seed=seed)] * 4
        row_seeds = [mix_seed(seed, j) for j in range(4)]
        outcomes.add(tuple(RejectionSampler(Sampler())(logits, metadata(seeded), [[0, 1, 2]], row_seeds).token_ids[0]))
    assert len(outcomes) > 3
