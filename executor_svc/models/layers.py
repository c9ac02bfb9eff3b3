"""Building blocks shared by the model files: a row-count-aware linear, RMSNorm and LayerNorm."""

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
# - From 3 rows on, oneDNN's matmul over a weight reordered once at load (pack_for_cpu_matmul) beats both
#   (30 layers of SmolLM2-135M's projections, AMD EPYC, 2 threads, 2026-11-27: 3-6 rows cost what 1-2 rows
#   cost through the weight-stationary product, against 1.4-2.2x; 16 rows 0.6x, 128-1024 rows 0.6-0.8x);
#   for 1-2 rows it is 1.3-1.5x slower, so those keep the weight-stationary product.
_MAX_WEIGHT_STATIONARY_ROWS = 64
PACKED_MIN_ROWS = 3
"""Rows from which linear() uses a packed weight when it is given one."""
_PACK_ROWS_HINT = 4  # the row count oneDNN's reorder is tuned for; measured fastest over 3-1024 rows


def pack_for_cpu_matmul(weight: torch.Tensor) -> torch.Tensor | None:
    """``weight`` [out, in] reordered once for oneDNN's float32 matmul (for linear's ``packed``), or None where
    that does not apply: not a float32 CPU tensor, or torch without oneDNN. A second copy of the weight. For
    eager CPU steps only: Inductor cannot lower the packed matmul over a weight that is not a frozen constant
    (the executor compiles nothing on the CPU; CUDA weights are never packed)."""
    if weight.device.type != "cpu" or weight.dtype != torch.float32 or not torch.backends.mkldnn.is_available():
        return None
    return torch.ops.mkldnn._reorder_linear_weight(weight.detach(), _PACK_ROWS_HINT)


def weight_stationary_rows(num_rows: int) -> int | None:
    """Rows to run (W @ x.T).T with for `num_rows` inputs on CPU (padding included), or None for F.linear."""
    if num_rows < 1 or num_rows > _MAX_WEIGHT_STATIONARY_ROWS:
        return None
    if num_rows <= 4:
        return 2 if num_rows <= 2 else 4
    if num_rows <= 6 or num_rows % 8 in (1, 2):
        return num_rows
    return -(-num_rows // 8) * 8


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
           packed: torch.Tensor | None = None) -> torch.Tensor:
    """F.linear(x, weight, bias) for x [N, in], choosing the fastest matmul layout for N on CPU (``packed``:
    the weight's pack_for_cpu_matmul copy, used from PACKED_MIN_ROWS rows on).

    The result may be a non-contiguous view; call .contiguous() or reshape() before viewing it.
    """
    if packed is not None and x.dim() == 2 and x.shape[0] >= PACKED_MIN_ROWS:
        return torch.ops.mkldnn._linear_pointwise(x.contiguous(), packed, bias, "none", [], "")
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


def layer_norm(x: torch.Tensor, weight: torch.Tensor, eps: float, bias: torch.Tensor | None = None) -> torch.Tensor:
    """LayerNorm over the last dimension (mean removed), scaled by weight, plus bias where given (Cohere has none,
    Phi-2 and StarCoder2 do)."""
    return F.layer_norm(x, weight.shape, weight, bias, eps)
