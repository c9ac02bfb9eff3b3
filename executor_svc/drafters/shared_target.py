"""The target's tensors an EAGLE-style head shares, whole on every rank.

The head reads the target's embedding of any token, the target's LM-head rows of its draft vocabulary and the
RoPE tables. Under tensor parallelism the target holds only its vocabulary slice of the embedding and LM head,
so the head, replicated on every rank, gets full copies gathered once at start-up (no collective in its steps).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from executor_svc.parallel.tensor_parallel import SINGLE, TensorParallel


@dataclass(frozen=True)
class SharedTargetTensors:
    """What an EAGLE-style head and the shipped-drafter probe read of the target, every vocabulary row."""

    config: Any
    """The target's HF config."""
    embed_weight: torch.Tensor
    """[vocab, hidden]."""
    lm_head_weight: torch.Tensor
    """[vocab, hidden] (the embedding itself for tied models)."""
    rope_cos: torch.Tensor
    rope_sin: torch.Tensor


def shared_target_tensors(model: Any, tp: TensorParallel = SINGLE) -> SharedTargetTensors:
    """The target's shared tensors; under tensor parallelism gathered from every rank's vocabulary slice (all
    ranks must call this together)."""
    embed = tp.all_gather_rows(model.embed_weight)
    tied = model.lm_head_weight is model.embed_weight
    lm_head = embed if tied else tp.all_gather_rows(model.lm_head_weight)
    return SharedTargetTensors(model.config, embed, lm_head, model.rope_cos, model.rope_sin)
