"""Building blocks shared by the model files: a row-count-aware linear, RMSNorm and LayerNorm."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from executor_svc.models.cpu_matmul_plan import current_plans, pack_for_cpu_matmul, run_choice

__all__ = ["layer_norm", "linear", "pack_for_cpu_matmul", "rms_norm"]


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
           packed: torch.Tensor | None = None) -> torch.Tensor:
    """F.linear(x, weight, bias) for x [N, in]; on the CPU through the matmul the process's plans (timed at load)
    found fastest for N rows and the weight's shape (``packed``: its pack_for_cpu_matmul copy, if it has one).

    The result may be a non-contiguous view; call .contiguous() or reshape() before viewing it.
    """
    if x.device.type != "cpu" or x.dim() != 2:
        return F.linear(x, weight, bias)
    choice = current_plans().choice(x.shape[0], packed is not None, weight.shape)  # a Size hashes as its tuple
    return run_choice(choice, x, weight, bias, packed)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm over the last dimension, scaled by weight."""
    return F.rms_norm(x, weight.shape, weight, eps)


def layer_norm(x: torch.Tensor, weight: torch.Tensor, eps: float, bias: torch.Tensor | None = None) -> torch.Tensor:
    """LayerNorm over the last dimension (mean removed), scaled by weight, plus bias where given (Cohere has none,
    Phi-2 and StarCoder2 do)."""
    return F.layer_norm(x, weight.shape, weight, bias, eps)
