"""Building blocks shared by the model files: a row-count-aware linear, RMSNorm and rotary embeddings."""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F

# CPU (MKL, fp32) timings for 2-16 rows: F.linear(x, W) runs a GEMM whose cost grows with every row
# from the second on, while (W @ x.T).T streams W once and costs about one GEMV up to ~8 rows. A one-row
# GEMV is itself ~2x slower than the two-row product, so tiny row counts are padded up. Measured over
# SmolLM2-135M's projection shapes with 2 threads; see _PADDED_ROWS.
_PADDED_ROWS = {1: 2, 2: 2, 3: 4, 4: 4, 5: 5, 6: 6, 7: 7, 8: 8}


def weight_stationary_rows(num_rows: int) -> int | None:
    """Rows to run (W @ x.T).T with for `num_rows` inputs on CPU (padding included), or None for F.linear."""
    return _PADDED_ROWS.get(num_rows)


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
    if bias is None:
        out = torch.mm(weight, x.T)
    else:
        out = torch.addmm(bias.unsqueeze(1), weight, x.T)
    return out[:, :n].T if rows > n else out.T


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm over the last dimension, scaled by weight."""
    return F.rms_norm(x, weight.shape, weight, eps)


def rope_parameters(config: Any) -> dict[str, Any]:
    """The RoPE settings of an HF config as one dict with at least rope_type and rope_theta.

    transformers >= 5 stores them in config.rope_parameters; older versions in rope_scaling + rope_theta.
    """
    params = getattr(config, "rope_parameters", None)
    if params is None:
        params = dict(getattr(config, "rope_scaling", None) or {})
        params.setdefault("rope_theta", getattr(config, "rope_theta", 10000.0))
    params = dict(params)
    params["rope_type"] = params.get("rope_type", params.get("type", "default"))
    return params


def rope_inverse_frequencies(head_dim: int, params: dict[str, Any], max_position_embeddings: int) -> torch.Tensor:
    """float32 [head_dim / 2] inverse frequencies for the default, linear and llama3 RoPE types."""
    base = float(params["rope_theta"])
    inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    rope_type = params["rope_type"]
    if rope_type == "default":
        return inv_freq
    if rope_type == "linear":
        return inv_freq / float(params["factor"])
    if rope_type == "llama3":
        return _llama3_frequencies(inv_freq, params, max_position_embeddings)
    raise ValueError(f"rope_parameters: rope_type {rope_type!r} is not supported (default, linear, llama3)")


def _llama3_frequencies(inv_freq: torch.Tensor, params: dict[str, Any], max_position_embeddings: int) -> torch.Tensor:
    """Llama 3.1 scaling: long wavelengths divided by factor, short ones kept, smooth in between."""
    factor = float(params["factor"])
    low_freq_factor = float(params["low_freq_factor"])
    high_freq_factor = float(params["high_freq_factor"])
    old_context = float(params.get("original_max_position_embeddings", max_position_embeddings))
    low_freq_wavelen = old_context / low_freq_factor
    high_freq_wavelen = old_context / high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth = (old_context / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    is_medium = (wavelen >= high_freq_wavelen) & (wavelen <= low_freq_wavelen)
    return torch.where(is_medium, smoothed, scaled)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate x [T, heads, head_dim] by the angles whose cos/sin are [T, 1, head_dim / 2]."""
    first, second = x.chunk(2, dim=-1)
    return torch.cat((first * cos - second * sin, second * cos + first * sin), dim=-1)
