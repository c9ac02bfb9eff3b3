"""Rejection sampler: all accepted + bonus, first rejected, mixed batch, K = 0 rows, seeded determinism,
and seeded rows emitting what plain sampling would, whatever the drafts."""

from __future__ import annotations

import torch

from executor_svc.rejection_sampler import RejectionSampler
from executor_svc.sampler import Sampler
from executor_svc.sampling_metadata import RowSamplingParams, SamplingMetadata

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
    result = sampler(logits, metadata([GREEDY] * 4), [[3, 4, 5]])
    assert result.num_accepted == [3] and result.token_ids == [[3, 4, 5, 1]]


def test_greedy_first_rejected_emits_target_token():
    sampler = RejectionSampler(Sampler(seed=0))
    logits = one_hot_logits([3, 4, 5, 1])
    result = sampler(logits, metadata([GREEDY] * 4), [[2, 4, 5]])
    assert result.num_accepted == [0] and result.token_ids == [[3]]


def test_mixed_batch_with_k0_rows_and_padding():
    sampler = RejectionSampler(Sampler(seed=0))
    # request a: K=2 (second draft wrong); request b: K=0; request c: K=2 with a padded slot.
    logits = one_hot_logits([1, 2, 3, 4, 5, 0, 2])
    drafts = [[1, 5], [], [5, -1]]
    result = sampler(logits, metadata([GREEDY] * 7), drafts)
    assert result.token_ids == [[1, 2], [4], [5, 0]]
    assert result.num_accepted == [1, 0, 1]


def test_sampling_accepts_certain_drafts_and_rejects_impossible_ones():
    sampler = RejectionSampler(Sampler(seed=0))
    params = [RowSamplingParams(temperature=1.0)] * 3
    logits = one_hot_logits([2, 3, 4], strength=60.0)  # p is (numerically) one-hot
    accepted = sampler(logits, metadata(params), [[2, 3]])
    assert accepted.token_ids == [[2, 3, 4]] and accepted.num_accepted == [2]
    rejected = sampler(logits, metadata(params), [[1, 3]])
    assert rejected.num_accepted == [0] and rejected.token_ids == [[2]]


def test_seeded_verification_is_deterministic_and_seed_dependent():
    torch.manual_seed(0)
    logits = torch.randn(4, VOCAB)
    params = [RowSamplingParams(temperature=1.0, seed=7)] * 4
    runs = [RejectionSampler(Sampler())(logits, metadata(params), [[0, 1, 2]]).token_ids for _ in range(3)]
    assert runs[0] == runs[1] == runs[2]
    outcomes = set()
    for seed in range(40):
        seeded = [RowSamplingParams(temperature=1.0, seed=seed)] * 4
        outcomes.add(tuple(RejectionSampler(Sampler())(logits, metadata(seeded), [[0, 1, 2]]).token_ids[0]))
    assert len(outcomes) > 3


def positional_metadata(params: RowSamplingParams, outputs: list[list[int]]) -> SamplingMetadata:
    """One row per entry of ``outputs``: the request's outputs so far at that row (seed position)."""
    return SamplingMetadata.build([params] * len(outputs), [[0]] * len(outputs), outputs, VOCAB, "cpu")


def test_seeded_rows_emit_what_plain_sampling_emits_whatever_the_drafts():
    """Verification draws each position's token as the plain sampler would and accepts a draft only
    when it matches: a seeded request's tokens do not depend on the drafts or on K."""
    torch.manual_seed(1)
    params = RowSamplingParams(temperature=1.0, top_k=4, seed=11)
    for _ in range(30):
        logits = torch.randn(3, VOCAB) * 2
        outputs = [[5, 1], [5, 1, 2], [5, 1, 2, 3]]
        plain = [Sampler()(logits[j : j + 1], positional_metadata(params, [outputs[j]])).token_ids[0]
                 for j in range(3)]
        verify = RejectionSampler(Sampler())
        # Drafts equal to the plain tokens are all accepted; the emitted prefix is the plain one.
        all_right = verify(logits, positional_metadata(params, outputs), [plain[:2]])
        assert all_right.token_ids == [plain] and all_right.num_accepted == [2]
        # A wrong first draft is rejected and the row emits the plain token in its place.
        wrong = (plain[0] + 1) % VOCAB
        rejected = verify(logits, positional_metadata(params, outputs), [[wrong, plain[1]]])
        assert rejected.token_ids == [[plain[0]]] and rejected.num_accepted == [0]
