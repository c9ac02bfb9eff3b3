"""GPT-OSS's expert tensors as per-expert checkpoint names: stacked [experts, in, out] with gate and up columns
interleaved (even: gate, odd: up), biases alike, or MXFP4-quantised as ``_blocks`` and ``_scales`` pairs (the
released checkpoints), dequantised at load by transformers' own converter."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from transformers import PretrainedConfig

_EXPERTS = "mlp.experts."
_QUANTISED_HALVES = ("_blocks", "_scales")


class GptOssExpertLayout:
    """Turns one checkpoint tensor at a time into the per-expert tensors the weight router places
    (``mlp.experts.E.gate_proj.weight`` [I, hidden], ``...up_proj``, ``...down_proj`` [hidden, I] and their
    biases); an MXFP4 half waits for its other half."""

    def __init__(self, config: PretrainedConfig) -> None:
        self.num_experts = int(config.num_local_experts)
        self.hidden_size = int(config.hidden_size)
        self.intermediate_size = int(config.intermediate_size)
        self.pending: dict[str, dict[str, torch.Tensor]] = {}
        """MXFP4 halves by the tensor name they dequantise to, until both arrived."""

    def parts(self, name: str, tensor: torch.Tensor) -> list[tuple[str, torch.Tensor]] | None:
        """The per-expert tensors of ``name`` ([] while an MXFP4 half waits; None: not an expert tensor)."""
        if _EXPERTS not in name:
            return None
        if name.endswith(_QUANTISED_HALVES):
            return self._quantised_half(name, tensor)
        block, _, kind = name.rpartition(_EXPERTS)
        if kind not in ("gate_up_proj", "gate_up_proj_bias", "down_proj", "down_proj_bias"):
            return None
        self._check_shape(name, kind, tensor)
        prefix = block + _EXPERTS
        parts: list[tuple[str, torch.Tensor]] = []
        for expert, rows in enumerate(tensor):
            base = f"{prefix}{expert}."
            if kind == "gate_up_proj":  # [hidden, 2I]: columns interleave gate and up
                parts += [(base + "gate_proj.weight", rows[:, 0::2].T), (base + "up_proj.weight", rows[:, 1::2].T)]
            elif kind == "gate_up_proj_bias":
                parts += [(base + "gate_proj.bias", rows[0::2]), (base + "up_proj.bias", rows[1::2])]
            elif kind == "down_proj":  # [I, hidden]
                parts.append((base + "down_proj.weight", rows.T))
            else:
                parts.append((base + "down_proj.bias", rows))
        return parts

    def unpaired(self) -> list[str]:
        """The MXFP4 halves whose other half never arrived."""
        return sorted(f"{name}{half}" for name, halves in self.pending.items() for half in halves)

    def _quantised_half(self, name: str, tensor: torch.Tensor) -> list[tuple[str, torch.Tensor]]:
        from transformers.integrations.mxfp4 import convert_moe_packed_tensors

        half = next(suffix for suffix in _QUANTISED_HALVES if name.endswith(suffix))
        target = name[: -len(half)]
        halves = self.pending.setdefault(target, {})
        halves[half] = tensor
        if len(halves) < 2:
            return []
        del self.pending[target]
        blocks, scales = halves["_blocks"], halves["_scales"]
        if blocks.dim() != 4 or tuple(blocks.shape[:3]) != tuple(scales.shape):
            raise ValueError(f"weights: {target}_blocks {tuple(blocks.shape)} and _scales {tuple(scales.shape)} do "
                             "not pair as MXFP4 (blocks [experts, rows, groups, 16], scales [experts, rows, groups])")
        return self.parts(target, convert_moe_packed_tensors(blocks, scales, dtype=torch.float32)) or []

    def _check_shape(self, name: str, kind: str, tensor: torch.Tensor) -> None:
        experts, hidden, size = self.num_experts, self.hidden_size, self.intermediate_size
        expected = {"gate_up_proj": (experts, hidden, 2 * size), "gate_up_proj_bias": (experts, 2 * size),
                    "down_proj": (experts, size, hidden), "down_proj_bias": (experts, hidden)}[kind]
        if tuple(tensor.shape) != expected:
            raise ValueError(f"weights: {name!r} has shape {tuple(tensor.shape)}, expected {expected}")
