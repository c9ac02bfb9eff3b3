"""Quantised copies of the tiny checkpoints, written as FP8 and compressed-tensors releases store them.

Every projection weight (``*proj.weight``: attention, MLP, experts; not embeddings, norms, routers or the LM
head) is quantised with one scale per block of the grid asked for. Beside the quantised checkpoint a
``reference`` directory holds the same model with those weights dequantised here (values times their block's
scale, expanded element by element), for formats transformers cannot load without extra packages."""

from __future__ import annotations

import json
import math
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

FP8_MAX = 448.0
INT8_MAX = 127.0
REFERENCE = "reference"


Quantiser = Callable[[str, torch.Tensor], tuple[dict[str, torch.Tensor], torch.Tensor]]
"""(name of a projection's weight, the weight) -> (the module's stored parts by suffix, the dequantised weight)."""


def quantise_checkpoint(source: Path, out: Path, quantization_config: dict[str, Any], quantiser: Quantiser) -> Path:
    """Write ``source`` to ``out`` with every projection weight replaced by the parts ``quantiser`` stores for
    it, and ``out/reference`` with those weights dequantised."""
    quantised, reference = {}, {}
    for name, weight in load_file(str(source / "model.safetensors")).items():
        reference[name] = weight
        if not name.endswith("proj.weight"):
            quantised[name] = weight
            continue
        parts, reference[name] = quantiser(name, weight)
        module = name[: -len(".weight")]
        quantised.update({f"{module}.{suffix}": part for suffix, part in parts.items()})
    config = json.loads((source / "config.json").read_text())
    for directory, tensors, settings in ((out, quantised, quantization_config), (out / REFERENCE, reference, None)):
        directory.mkdir(parents=True, exist_ok=True)
        save_file(tensors, str(directory / "model.safetensors"), metadata={"format": "pt"})
        written = {**config, "quantization_config": settings} if settings else config
        (directory / "config.json").write_text(json.dumps(written))
        for extra in ("generation_config.json",):
            if (source / extra).is_file():
                shutil.copy(source / extra, directory / extra)
    return out


def _scaled(scale_suffix: str, block: tuple[int, int] | None, dtype: torch.dtype) -> Quantiser:
    """8-bit values with one scale per ``block`` (the last blocks partial; None: one per output row)."""
    def quantise(name: str, weight: torch.Tensor) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        grid = block or (1, weight.shape[1])
        values, scales = _quantise(weight, grid, dtype)
        return {"weight": values, scale_suffix: scales}, _dequantised_elementwise(values, scales, grid)
    return quantise


def fp8_blocks(source: Path, out: Path, block: tuple[int, int]) -> Path:
    """transformers' fine-grained FP8 layout (DeepSeek-V3's): ``weight_scale_inv`` per block."""
    settings = {"quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": list(block)}
    return quantise_checkpoint(source, out, settings, _scaled("weight_scale_inv", block, torch.float8_e4m3fn))


def compressed_tensors_channels(source: Path, out: Path, dtype: torch.dtype = torch.float8_e4m3fn) -> Path:
    """compressed-tensors' FP8-dynamic (or W8A8 int8) layout: ``weight_scale`` [rows, 1] per output channel and a
    dropped ``input_scale`` beside each weight, as static-activation releases carry."""
    kind = "float" if dtype != torch.int8 else "int"
    settings = {
        "quant_method": "compressed-tensors", "format": f"{kind}-quantized", "ignore": ["lm_head"],
        "config_groups": {"group_0": {"targets": ["Linear"],
                                      "weights": {"num_bits": 8, "type": kind, "strategy": "channel",
                                                  "symmetric": True, "dynamic": False},
                                      "input_activations": {"num_bits": 8, "type": kind, "strategy": "tensor",
                                                            "symmetric": True, "dynamic": False}}},
    }
    out = quantise_checkpoint(source, out, settings, _scaled("weight_scale", None, dtype))
    tensors = load_file(str(out / "model.safetensors"))
    for name in [n for n in tensors if n.endswith("proj.weight")]:
        tensors[name[: -len("weight")] + "input_scale"] = torch.tensor([0.5])
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    return out


def _quantise(weight: torch.Tensor, block: tuple[int, int], dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    rows, cols = weight.shape
    grid = (math.ceil(rows / block[0]), math.ceil(cols / block[1]))
    scales = torch.empty(grid)
    values = torch.empty_like(weight)
    largest = INT8_MAX if dtype == torch.int8 else FP8_MAX
    for i in range(grid[0]):
        for j in range(grid[1]):
            part = weight[i * block[0] : (i + 1) * block[0], j * block[1] : (j + 1) * block[1]]
            scales[i, j] = part.abs().max() / largest
            values[i * block[0] : (i + 1) * block[0], j * block[1] : (j + 1) * block[1]] = part / scales[i, j]
    return (values.round() if dtype == torch.int8 else values).to(dtype), scales


def _dequantised_elementwise(values: torch.Tensor, scales: torch.Tensor, block: tuple[int, int]) -> torch.Tensor:
    """values times the scale of each element's block, found by integer division of its row and column (not the
    loader's way of spreading scales)."""
    rows, cols = values.shape
    each = scales[torch.arange(rows) // block[0]][:, torch.arange(cols) // block[1]]
    return values.float() * each


def gptq(source: Path, out: Path, bits: int, group_size: int, act_order: bool, checkpoint_format: str = "gptq"
         ) -> Path:
    """AutoGPTQ's layout: rows packed into ``qweight``, zero points (minus one in the gptq format) into ``qzeros``
    by columns, fp16 ``scales``, ``g_idx``; act order assigns the input rows to groups in a shuffled order."""
    settings = {"quant_method": "gptq", "bits": bits, "group_size": group_size, "desc_act": act_order, "sym": False,
                "checkpoint_format": checkpoint_format}

    def quantise(name: str, weight: torch.Tensor) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        columns = weight.t()  # [in, out]
        rows = columns.shape[0]
        order = torch.randperm(rows, generator=torch.Generator().manual_seed(rows)) if act_order else torch.arange(rows)
        groups = torch.empty(rows, dtype=torch.int32)
        groups[order] = (torch.arange(rows) // group_size).int()
        values, zeros, scales = _integer_groups(columns, groups, bits, lowest_zero=1 if checkpoint_format == "gptq"
                                                else 0)
        stored_zeros = zeros - 1 if checkpoint_format == "gptq" else zeros
        per_word = 32 // bits
        qweight = _words([[values[r * per_word + i] for i in range(per_word)] for r in range(rows // per_word)], bits)
        qzeros = _words([[stored_zeros[:, c * per_word + i] for i in range(per_word)]
                         for c in range(zeros.shape[1] // per_word)], bits).t().contiguous()
        parts = {"qweight": qweight, "qzeros": qzeros, "scales": scales, "g_idx": groups}
        return parts, _reference(values, zeros, scales, groups)

    return quantise_checkpoint(source, out, settings, quantise)


def awq(source: Path, out: Path, group_size: int) -> Path:
    """AutoAWQ's GEMM layout: eight columns per word of ``qweight`` and ``qzeros`` in the order 0 2 4 6 1 3 5 7."""
    settings = {"quant_method": "awq", "bits": 4, "group_size": group_size, "zero_point": True, "version": "gemm"}

    def quantise(name: str, weight: torch.Tensor) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        columns = weight.t()  # [in, out]
        groups = (torch.arange(columns.shape[0]) // group_size).int()
        values, zeros, scales = _integer_groups(columns, groups, 4, lowest_zero=0)
        order = (0, 2, 4, 6, 1, 3, 5, 7)
        qweight = _words([[values[:, c * 8 + order[i]] for i in range(8)] for c in range(values.shape[1] // 8)], 4)
        qzeros = _words([[zeros[:, c * 8 + order[i]] for i in range(8)] for c in range(zeros.shape[1] // 8)], 4)
        parts = {"qweight": qweight.t().contiguous(), "qzeros": qzeros.t().contiguous(), "scales": scales}
        return parts, _reference(values, zeros, scales, groups)

    return quantise_checkpoint(source, out, settings, quantise)


def _integer_groups(columns: torch.Tensor, groups: torch.Tensor, bits: int, lowest_zero: int
                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Asymmetric min-max quantisation of [in, out] per (group of input rows, column): integer values [in, out],
    zero points and fp16 scales [groups, out]. ``lowest_zero``: the gptq format cannot store a zero point of 0."""
    top = (1 << bits) - 1
    count = int(groups.max()) + 1
    scales = torch.empty(count, columns.shape[1], dtype=torch.float16)
    zeros = torch.empty(count, columns.shape[1], dtype=torch.int64)
    values = torch.empty(columns.shape, dtype=torch.int64)
    for group in range(count):
        rows = columns[groups == group]
        low, high = rows.min(dim=0).values.clamp(max=0), rows.max(dim=0).values.clamp(min=0)
        scale = ((high - low) / top).clamp(min=1e-6).half()
        zero = (-low / scale.float()).round().clamp(lowest_zero, top).long()
        values[groups == group] = (rows / scale.float()).round().long().add(zero).clamp(0, top)
        scales[group], zeros[group] = scale, zero
    return values, zeros, scales


def _words(fields: list[list[torch.Tensor]], bits: int) -> torch.Tensor:
    """int32 words from lists of fields, field i at bits * i (as two's complement when the top bit is set)."""
    words = torch.stack([sum(field.long() << (bits * i) for i, field in enumerate(row)) for row in fields])
    return torch.where(words >= 1 << 31, words - (1 << 32), words).to(torch.int32)


def _reference(values: torch.Tensor, zeros: torch.Tensor, scales: torch.Tensor, groups: torch.Tensor
               ) -> torch.Tensor:
    """[out, in] weights, each input row taking its own group's zero points and scales."""
    rows = [(values[r] - zeros[int(groups[r])]).float() * scales[int(groups[r])].float() for r in range(len(values))]
    return torch.stack(rows).t().contiguous()


def compressed_tensors_packed(source: Path, out: Path, bits: int, group_size: int) -> Path:
    """compressed-tensors' pack-quantized layout (W4A16, W8A16): symmetric integers per group of input columns,
    offset by 2 ** (bits - 1) and packed along each row into ``weight_packed``, with ``weight_shape``."""
    group = {"targets": ["Linear"], "weights": {"num_bits": bits, "type": "int", "strategy": "group",
                                                "group_size": group_size, "symmetric": True, "dynamic": False}}
    settings = {"quant_method": "compressed-tensors", "format": "pack-quantized", "ignore": ["lm_head"],
                "config_groups": {"group_0": group}}
    top = (1 << (bits - 1)) - 1

    def quantise(name: str, weight: torch.Tensor) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        rows, cols = weight.shape
        scales = weight.reshape(rows, cols // group_size, group_size).abs().amax(-1) / top
        each = scales[:, torch.arange(cols) // group_size]
        values = (weight / each).round().clamp(-top - 1, top).long()
        per_word = 32 // bits
        offset = values + (1 << (bits - 1))
        packed = _words([[offset[:, w * per_word + i] for i in range(per_word)] for w in range(cols // per_word)],
                        bits).t().contiguous()
        parts = {"weight_packed": packed, "weight_scale": scales, "weight_shape": torch.tensor([rows, cols])}
        return parts, values.float() * each

    return quantise_checkpoint(source, out, settings, quantise)
