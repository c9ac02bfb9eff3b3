"""Attention with soft-capped scores (Gemma 2's attn_logit_softcapping), computed explicitly in torch.

torch's scaled_dot_product_attention cannot transform the scores between the product and the softmax, so
the torch backends run capped layers through ``softcapped_attention`` and keep SDPA for every other layer.
"""

from __future__ import annotations

import torch


def soft_cap(scores: torch.Tensor, cap: float) -> torch.Tensor:
    """cap * tanh(scores / cap): HF's soft cap of attention scores and of Gemma's final logits."""
    return torch.tanh(scores / cap) * cap


def softcapped_attention(
    queries: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    mask: torch.Tensor,
    scale: float,
    logit_softcap: float,
) -> torch.Tensor:
    """softmax(mask(c * tanh(scale * q.k / c))) @ v, as HF's eager attention computes it for Gemma 2.

    queries [..., M, D], keys/values [..., N, D], mask bool broadcastable to [..., M, N] (True: the query sees
    the key), any leading dims that broadcast. The cap applies before the mask, so a masked score is exactly
    -inf; the softmax runs in float32 and its weights are cast back to the queries' dtype. Every row must see
    at least one key (a row that sees none would be NaN).
    """
    scores = soft_cap(torch.matmul(queries, keys.transpose(-1, -2)) * scale, logit_softcap)
    scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1, dtype=torch.float32).to(queries.dtype)
    return torch.matmul(weights, values)
