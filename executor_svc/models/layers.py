"""Building blocks shared by the model files: a row-count-aware linear and RMSNorm."""

from __future__ import annotations

import torch
import torch.nn.functional as F

# CPU matmul layout, measured over whole SmolLM2-135M decode forwards (MKL, fp32, 2 threads, torch 2.13):
# - F.linear(x, W) with 2-8 rows costs about 2x the one-row call, and 1.1-1.3x the alternative up to 64;
# - the weight-stationary (W @ x.T).T with 2 or 4 rows costs what one row costs, and its kernel is fast
#   for 5, 6 and multiples of 8 (plus one or two) rows but up to 1.5x slower in between, so those
#   counts are padded up to the next multiple of 8;
# - a single row is a GEMV that is 2x slower than the two-row product, so one row is padded to two.
# Above 64 rows both layouts cost the same and F.linear is kept.
_MAX_WEIGHT_STATIONARY_ROWS = 64


def weight_stationary_rows(num_rows: int) -> int | None:
    """Rows to run (W @ x.T).T with for `num_rows` inputs on CPU (padding included), or None for F.linear."""
    if num_rows < 1 or num_rows > _MAX_WEIGHT_STATIONARY_ROWS:
        return None
    if num_rows <= 4:
        return 2 if num_rows <= 2 else 4
    if num_rows <= 6 or num_rows % 8 in (1, 2):
        return num_rows
    return -(-num_rows // 8) * 8


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """F.linear(x, weight, bias) for x [N, in], choosing the fastest matmul layout for N on CPU.

    The result may be a non-contiguous view; call .contiguous() or reshape() before viewing it.
    """
    rows = weight_stationary_rows(x.shape[0]) if x.device.type == "cpu" and x.dim() == 2 else None
    if rows is None:
        return F.linear(x, weight, bias)
    n = x.shape[0]
    if rows > n:
        x = torch.cat([x, x[-1:].expand(rows - n, -1)])
    else:
        # A transposed input (e.g. silu(gate) * up over a previous `.T` output) makes x.T contiguous,
        # which MKL runs through a path about 4x slower than for a row-major x.
        x = x.contiguous()
    if bias is None:
        out = torch.mm(weight, x.T)
    else:
        out = torch.addmm(bias.unsqueeze(1), weight, x.T)
    return out[:, :n].T if rows > n else out.T


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm over the last dimension, scaled by weight."""
    return F.rms_norm(x, weight.shape, weight, eps)
