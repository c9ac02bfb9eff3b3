"""Attention computed explicitly in torch, for layers scaled_dot_product_attention cannot run: soft-capped scores
(Gemma 2's attn_logit_softcapping) and attention sinks (GPT-OSS: a learned logit per head that joins every softmax's
denominator and attends to nothing). The torch backends keep SDPA for every other layer."""

from __future__ import annotations

import torch

from executor_svc.attention.softcap import soft_cap


def explicit_attention(
    queries: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    mask: torch.Tensor,
    scale: float,
    logit_softcap: float | None = None,
    sinks: torch.Tensor | None = None,
) -> torch.Tensor:
    """softmax(mask(cap(scale * q.k)) ++ sink) @ v without the sink's column, as HF's eager attention computes it.

    queries [..., M, D], keys/values [..., N, D], mask bool broadcastable to [..., M, N] (True: the query sees
    the key), any leading dims that broadcast; ``sinks`` broadcastable to [..., M, 1]: each query row's sink logit
    (its head's). The cap applies before the mask, so a masked score is exactly -inf; the softmax runs in float32
    and its weights are cast back to the queries' dtype. Every row must see at least one key or a sink.
    """
    scores = torch.matmul(queries, keys.transpose(-1, -2)) * scale
    if logit_softcap is not None:
        scores = soft_cap(scores, logit_softcap)
    scores = scores.masked_fill(~mask, float("-inf"))
    if sinks is None:
        weights = torch.softmax(scores, dim=-1, dtype=torch.float32)
    else:
        column = sinks.to(scores.dtype).expand(*scores.shape[:-1], 1)
        weights = torch.softmax(torch.cat((scores, column), dim=-1), dim=-1, dtype=torch.float32)[..., :-1]
    return torch.matmul(weights.to(queries.dtype), values)
