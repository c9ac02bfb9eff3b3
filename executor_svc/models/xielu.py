"""xIELU, the activation of Apertus's MLPs: piecewise, with two learned coefficients per layer (arXiv 2411.13010).

    xielu(x) = alpha_p * x^2 + beta * x                          for x > 0
             = (expm1(min(x, eps)) - x) * alpha_n + beta * x      otherwise

with alpha_p = softplus(a_p) and alpha_n = beta + softplus(a_n) from the checkpoint's raw ``alpha_p`` and ``alpha_n``
(``mlp.act_fn.*``, as transformers computes it), beta and eps stored beside them."""

from __future__ import annotations

import torch
import torch.nn.functional as F

XIELU_PARAMETERS = ("alpha_p", "alpha_n", "beta", "eps")
"""The checkpoint's names (after ``mlp.act_fn.``), in the order a layer's parameter vector holds them."""


def xielu(x: torch.Tensor, parameters: torch.Tensor) -> torch.Tensor:
    """x [...] -> xIELU(x) under a layer's ``parameters`` [4] (XIELU_PARAMETERS' order); no host read."""
    raw_p, raw_n, beta, eps = parameters[0:1], parameters[1:2], parameters[2], parameters[3]
    alpha_p = F.softplus(raw_p)
    alpha_n = beta + F.softplus(raw_n)
    return torch.where(x > 0, alpha_p * x * x + beta * x, (torch.expm1(torch.minimum(x, eps)) - x) * alpha_n + beta * x)
