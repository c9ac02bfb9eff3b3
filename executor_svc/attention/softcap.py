"""Soft caps: Gemma 2's attn_logit_softcapping of attention scores and final_logit_softcapping of logits."""

from __future__ import annotations

import torch


def soft_cap(scores: torch.Tensor, cap: float) -> torch.Tensor:
    """cap * tanh(scores / cap): HF's soft cap of attention scores and of Gemma's final logits."""
    return torch.tanh(scores / cap) * cap
