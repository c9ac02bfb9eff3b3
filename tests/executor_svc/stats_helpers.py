"""Statistics shared by the sampling tests."""

from __future__ import annotations

import torch


def chi_square_p_value(counts: torch.Tensor, probs: torch.Tensor) -> float:
    """Pearson chi-square p-value of observed counts against expected probabilities.

    Cells expected fewer than 5 times are pooled into one bin.
    """
    expected = probs.double() * counts.sum().double()
    rare = expected < 5
    observed = torch.cat([counts.double()[~rare], counts.double()[rare].sum().view(1)])
    expected = torch.cat([expected[~rare], expected[rare].sum().view(1)])
    keep = expected > 0
    stat = ((observed[keep] - expected[keep]) ** 2 / expected[keep]).sum()
    dof = torch.tensor(float(keep.sum().item() - 1), dtype=torch.float64)
    return torch.special.gammaincc(dof / 2, stat / 2).item()
