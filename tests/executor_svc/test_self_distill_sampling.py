"""The self-distiller's sampled continuations: drawn from the tempered distribution, seeded, one draw per row."""

from __future__ import annotations

import torch
from stats_helpers import chi_square_p_value

from executor_svc.drafter_training.self_distill import sample_rows


def test_draws_follow_the_tempered_softmax():
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0, -30.0, 0.5]])
    temperature = 0.7
    generator = torch.Generator().manual_seed(0)
    draws = torch.tensor([sample_rows(logits, temperature, generator)[0] for _ in range(4000)])
    counts = torch.bincount(draws, minlength=logits.shape[1])
    probs = torch.softmax(logits[0] / temperature, dim=-1)
    assert chi_square_p_value(counts, probs) > 1e-3
    assert counts[4] == 0  # a token of probability ~1e-19 is not drawn 4000 times over


def test_every_row_draws_from_its_own_distribution():
    logits = torch.full((3, 5), -1e4)
    logits[0, 1] = logits[1, 4] = logits[2, 0] = 0.0
    assert sample_rows(logits, 1.0, torch.Generator().manual_seed(1)) == [1, 4, 0]


def test_the_same_seed_draws_the_same_tokens():
    logits = torch.randn(8, 1000, generator=torch.Generator().manual_seed(2))
    first = sample_rows(logits, 0.7, torch.Generator().manual_seed(3))
    assert first == sample_rows(logits, 0.7, torch.Generator().manual_seed(3))
    assert first != sample_rows(logits, 0.7, torch.Generator().manual_seed(4))


def test_a_one_hot_distribution_never_draws_past_the_vocabulary():
    logits = torch.full((4, 7), float("-inf"))
    logits[:, -1] = 0.0
    assert sample_rows(logits, 0.5, torch.Generator().manual_seed(5)) == [6, 6, 6, 6]
