"""Tests of the executor's sampler: penalties, greedy, filters, distributions, seeds, logprobs."""

from __future__ import annotations

import pytest
import torch
from stats_helpers import chi_square_p_value

from executor_svc.penalties import apply_penalties, build_penalty_tensors
from executor_svc.sampler import Sampler, apply_top_k_top_p_
from executor_svc.sampling_metadata import RowSamplingParams, SamplingMetadata, mix_seed
from stepahead_proto import sampling_pb2

VOCAB = 256
P = RowSamplingParams


def build(
    params: list[RowSamplingParams], prompts=None, outputs=None, vocab: int = VOCAB
) -> SamplingMetadata:
    """Metadata for ``params`` with empty (or given) token histories."""
    prompts = prompts if prompts is not None else [[] for _ in params]
    outputs = outputs if outputs is not None else [[] for _ in params]
    return SamplingMetadata.build(params, prompts, outputs, vocab, "cpu")


def random_logits(rows: int, scale: float = 1.0, vocab: int = VOCAB, seed: int = 0) -> torch.Tensor:
    """Seeded standard-normal logits times ``scale``."""
    return torch.randn(rows, vocab, generator=torch.Generator().manual_seed(seed)) * scale


def draw_counts(
    logits_row: torch.Tensor, params: RowSamplingParams, draws: int, rows: int = 500
) -> torch.Tensor:
    """Histogram of ``draws`` samples of one row, drawn ``rows`` at a time with a fixed seed."""
    sampler = Sampler(seed=1234)
    meta = build([params] * rows, vocab=logits_row.numel())
    batch = logits_row.expand(rows, -1).contiguous()
    counts = torch.zeros(logits_row.numel())
    for _ in range(draws // rows):
        tokens = sampler.sample(batch, meta).token_ids
        counts += torch.bincount(tokens, minlength=logits_row.numel()).float()
    return counts


def reference_allowed(logits_row: torch.Tensor, top_k: int, top_p: float) -> set[int]:
    """Tokens allowed by top-k then top-p, computed the slow obvious way."""
    order = logits_row.argsort(descending=True).tolist()
    if top_k > 0:
        order = order[:top_k]
    probs = logits_row[order].softmax(dim=-1).tolist()
    allowed, total = set(), 0.0
    for token, p in zip(order, probs):
        allowed.add(token)
        total += p
        if total >= top_p:
            break
    return allowed


# ---- parameters -------------------------------------------------------------------------


@pytest.mark.parametrize("field,value", [
    ("temperature", -0.1), ("top_p", 0.0), ("top_p", 1.5), ("top_k", 0), ("min_p", 1.1),
    ("repetition_penalty", 0.0), ("presence_penalty", 2.5), ("frequency_penalty", -3.0),
    ("seed", -1), ("logprobs", 21),
])
def test_invalid_params_raise_value_error_naming_the_field(field, value):
    with pytest.raises(ValueError, match=field):
        P(**{field: value})


def test_from_proto_applies_defaults_and_reads_set_fields():
    assert P.from_proto(sampling_pb2.SamplingParams()) == P()
    msg = sampling_pb2.SamplingParams(temperature=0.0, top_k=5, seed=7, logprobs=0, min_p=0.25)
    assert P.from_proto(msg) == P(temperature=0.0, top_k=5, seed=7, logprobs=0, min_p=0.25)


def test_build_rejects_mismatched_row_counts():
    with pytest.raises(ValueError, match="one entry per row"):
        SamplingMetadata.build([P()], [[], []], [[]], VOCAB, "cpu")


# ---- greedy and penalties ---------------------------------------------------------------


def test_greedy_equals_argmax_and_takes_the_fast_path():
    logits = random_logits(16)
    meta = build([P(temperature=0.0)] * 16)
    assert meta.all_greedy and meta.penalties is None
    assert Sampler(seed=0)(logits, meta).token_ids == logits.argmax(dim=-1).tolist()


def test_greedy_rows_of_a_mixed_batch_take_the_argmax():
    logits = random_logits(6, scale=0.1)
    params = [P(temperature=0.0, top_p=0.1, top_k=3), P(), P(temperature=0.0), P(top_k=2), P(),
              P(temperature=0.0)]
    tokens = Sampler(seed=0)(logits, build(params)).token_ids
    argmax = logits.argmax(dim=-1).tolist()
    assert [tokens[i] for i in (0, 2, 5)] == [argmax[i] for i in (0, 2, 5)]


def test_repetition_penalty_changes_greedy_argmax_as_computed_by_hand():
    logits = torch.full((3, 8), -5.0)
    logits[0, :3] = torch.tensor([2.0, 1.5, 0.1])  # seen 0: 2.0 / 2 = 1.0 < 1.5 -> token 1
    logits[1, :3] = torch.tensor([-0.5, -0.6, -0.7])  # seen 0: -0.5 * 2 = -1.0 < -0.6 -> token 1
    logits[2, :3] = torch.tensor([2.0, 1.5, 0.1])  # seen 0 in output only: also token 1
    params = [P(temperature=0.0, repetition_penalty=2.0)] * 3
    meta = build(params, prompts=[[0], [0, 0], []], outputs=[[], [], [0]], vocab=8)
    assert Sampler(seed=0)(logits, meta).token_ids == [1, 1, 1]
    unpenalised = build([P(temperature=0.0)] * 3, vocab=8)
    assert Sampler(seed=0)(logits, unpenalised).token_ids == [0, 0, 0]


def test_presence_and_frequency_penalties_apply_to_output_tokens_only():
    logits = torch.tensor([[1.0, 1.0, 1.0, 1.0, -1.0, 0.0]])
    params = [P(presence_penalty=0.25, frequency_penalty=0.5)]
    pen = build_penalty_tensors(params, [[3]], [[1, 1, 2, 4]], 6, "cpu")
    penalised = apply_penalties(logits, pen)
    # token 1: 1 - 0.5*2 - 0.25; token 2 and 4: x - 0.5 - 0.25; token 3 only in the prompt.
    expected = torch.tensor([[1.0, -0.25, 0.25, 1.0, -1.75, 0.0]])
    torch.testing.assert_close(penalised, expected)
    assert logits[0, 1] == 1.0, "the input logits must not be modified"


def test_all_penalties_combine_on_hand_made_logits():
    logits = torch.tensor([[3.0, -1.0, 2.0, 0.5]])
    params = [P(repetition_penalty=2.0, presence_penalty=0.5, frequency_penalty=1.0)]
    pen = build_penalty_tensors(params, [[0]], [[1, 2, 2]], 4, "cpu")
    # 0: 3/2; 1: -1*2 - 1 - 0.5; 2: 2/2 - 2 - 0.5; 3: untouched.
    expected = torch.tensor([[1.5, -3.5, -1.5, 0.5]])
    torch.testing.assert_close(apply_penalties(logits, pen), expected)


def test_rows_without_penalties_are_untouched_in_a_penalised_batch():
    logits = random_logits(2)
    params = [P(temperature=0.0), P(temperature=0.0, frequency_penalty=1.0)]
    pen = build_penalty_tensors(params, [[1, 2], [1]], [[3, 3], [3]], VOCAB, "cpu")
    penalised = apply_penalties(logits, pen)
    torch.testing.assert_close(penalised[0], logits[0])
    assert penalised[1, 3] == logits[1, 3] - 1.0


# ---- filters ----------------------------------------------------------------------------


def test_top_k_one_and_tiny_top_p_equal_greedy():
    logits = random_logits(32, scale=0.5)
    params = [P(top_k=1, seed=i) if i % 2 else P(top_p=1e-6) for i in range(32)]
    for _ in range(5):
        assert Sampler()(logits, build(params)).token_ids == logits.argmax(dim=-1).tolist()


def test_min_p_drops_tokens_below_the_fraction_of_the_top_probability():
    probs = torch.tensor([0.5, 0.3, 0.15, 0.05])
    counts = draw_counts(probs.log(), P(min_p=0.2), draws=4000)  # keeps p >= 0.1
    assert counts[3] == 0
    assert (counts[:3] > 0).all()
    assert chi_square_p_value(counts, torch.tensor([0.5, 0.3, 0.15, 0.0]) / 0.95) > 0.01


@pytest.mark.parametrize("top_k,top_p", [(5, 1.0), (-1, 0.6), (20, 0.8), (3, 0.999)])
def test_top_k_top_p_never_sample_outside_the_allowed_set(top_k, top_p):
    logits_row = random_logits(1, scale=2.0, seed=top_k + 10)[0]
    allowed = reference_allowed(logits_row, top_k, top_p)
    counts = draw_counts(logits_row, P(top_k=top_k, top_p=top_p), draws=5000)
    sampled = set(torch.nonzero(counts).flatten().tolist())
    assert sampled <= allowed
    assert len(sampled) == len(allowed)


def test_top_k_top_p_sample_the_renormalised_distribution():
    logits_row = random_logits(1, scale=1.5, seed=3)[0]
    allowed = torch.tensor(sorted(reference_allowed(logits_row, 10, 0.7)))
    expected = torch.zeros(VOCAB)
    expected[allowed] = logits_row[allowed].softmax(dim=-1)
    counts = draw_counts(logits_row, P(top_k=10, top_p=0.7), draws=10000)
    assert counts[expected == 0].sum() == 0
    assert chi_square_p_value(counts, expected) > 0.01


def test_cpu_prefix_filter_matches_a_full_sort():
    vocab = 8192
    # Rows from peaked to flat, so nuclei end inside 256, inside 4096 and beyond.
    scales = (8, 3, 1, 0.01)
    logits = torch.cat([random_logits(2, scale=s, vocab=vocab, seed=i)
                        for i, s in enumerate(scales)])
    params = [P(top_p=p, top_k=k) for p, k in [(0.9, -1), (0.5, 40)] * 4]
    limits = build(params, vocab=vocab).sampling.top_k_top_p
    fast = logits.clone()
    apply_top_k_top_p_(fast, limits)
    sizes = []
    for i, p in enumerate(params):
        allowed = reference_allowed(logits[i], p.top_k, p.top_p)
        assert set(torch.isfinite(fast[i]).nonzero().flatten().tolist()) == allowed, f"row {i}"
        sizes.append(len(allowed))
    assert min(sizes) < 256 and any(256 < n <= 4096 for n in sizes) and max(sizes) > 4096


# ---- distributions ----------------------------------------------------------------------


@pytest.mark.parametrize("temperature", [1.0, 0.5])
def test_sampling_matches_the_tempered_softmax(temperature):
    logits_row = random_logits(1, scale=1.0, seed=5)[0]
    counts = draw_counts(logits_row, P(temperature=temperature), draws=20000)
    assert chi_square_p_value(counts, (logits_row / temperature).softmax(dim=-1)) > 0.01
    # The test has power: the other temperature's distribution is rejected.
    other = 1.0 if temperature != 1.0 else 0.5
    assert chi_square_p_value(counts, (logits_row / other).softmax(dim=-1)) < 1e-6


# ---- seeds ------------------------------------------------------------------------------


def seeded_token(logits_row: torch.Tensor, params: RowSamplingParams, position: int,
                 neighbours: list[RowSamplingParams], row: int, sampler_seed: int = 0) -> int:
    """The token of a row at ``position`` placed at ``row`` among ``neighbours``."""
    batch_params = neighbours[:row] + [params] + neighbours[row:]
    logits = random_logits(len(batch_params), scale=0.2, seed=99 + row)
    logits[row] = logits_row
    outputs = [[7] * 3 for _ in batch_params]
    outputs[row] = [1] * position
    meta = build(batch_params, prompts=[[2, 3] for _ in batch_params], outputs=outputs)
    return Sampler(seed=sampler_seed)(logits, meta).token_ids[row]


def test_seeded_row_gives_the_same_token_alone_and_anywhere_in_mixed_batches():
    logits_row = random_logits(1, scale=0.2, seed=11)[0]
    params = P(seed=123, top_p=0.95, temperature=0.9)
    neighbours = [P(temperature=0.0), P(top_k=5), P(seed=5), P(min_p=0.1, frequency_penalty=0.5),
                  P(), P(top_p=0.5, logprobs=3), P(seed=123, temperature=0.7)]
    for position in (0, 4, 17):
        alone = seeded_token(logits_row, params, position, [], 0)
        for row, sampler_seed in [(0, 1), (3, 2), (7, 3)]:
            placed = seeded_token(logits_row, params, position, neighbours, row, sampler_seed)
            assert placed == alone, (position, row)


def test_seeded_positions_draw_independently():
    logits_row = random_logits(1, scale=0.1, seed=12)[0]
    tokens = [seeded_token(logits_row, P(seed=42), n, [], 0) for n in range(50)]
    assert len(set(tokens)) > 25  # near-uniform over 256 tokens: ~45 distinct expected
    other_seed = [seeded_token(logits_row, P(seed=43), n, [], 0) for n in range(50)]
    assert tokens != other_seed


def test_mix_seed_separates_seeds_and_positions():
    mixed = {mix_seed(s, n) for s in range(20) for n in range(20)}
    assert len(mixed) == 400
    assert all(0 <= m < 2**64 for m in mixed)


def test_unseeded_rows_follow_the_sampler_seed():
    logits = random_logits(16, scale=0.1)
    meta = build([P()] * 16)
    assert Sampler(seed=3)(logits, meta).token_ids == Sampler(seed=3)(logits, meta).token_ids
    assert Sampler(seed=3)(logits, meta).token_ids != Sampler(seed=4)(logits, meta).token_ids


# ---- logprobs ---------------------------------------------------------------------------


def test_logprobs_are_log_softmax_of_raw_logits_with_ordered_top_alternatives():
    logits = random_logits(4, scale=2.0)
    params = [P(logprobs=5, temperature=0.5, repetition_penalty=1.5), P(),
              P(temperature=0.0, logprobs=3), P(top_k=4, logprobs=20)]
    meta = build(params, prompts=[[0, 1, 2]] * 4, outputs=[[3]] * 4)
    out = Sampler(seed=0)(logits, meta)
    reference = logits.log_softmax(dim=-1)
    assert out.logprobs[1] is None
    for row, n in [(0, 5), (2, 3), (3, 20)]:
        lp = out.logprobs[row]
        expected_sampled = reference[row, out.token_ids[row]].item()
        assert lp.sampled_logprob == pytest.approx(expected_sampled, abs=1e-5)
        expected = reference[row].topk(n)
        assert lp.top_ids == expected.indices.tolist()
        assert lp.top_logprobs == pytest.approx(expected.values.tolist(), abs=1e-5)
        assert lp.top_logprobs == sorted(lp.top_logprobs, reverse=True)


def test_zero_logprobs_returns_only_the_sampled_logprob():
    logits = random_logits(2)
    out = Sampler(seed=0)(logits, build([P(logprobs=0), P(temperature=0.0, logprobs=0)]))
    for row in range(2):
        lp = out.logprobs[row]
        assert lp.top_ids == [] and lp.top_logprobs == []
        expected = logits[row].log_softmax(dim=-1)[out.token_ids[row]].item()
        assert lp.sampled_logprob == pytest.approx(expected, abs=1e-5)


def test_logits_shape_must_match_metadata():
    with pytest.raises(ValueError, match="logits shape"):
        Sampler()(random_logits(3), build([P()] * 2))
