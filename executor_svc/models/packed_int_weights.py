"""GPTQ and AWQ checkpoints: integer weights packed in int32 words with per-group scales and zero points,
dequantised at load to ``(q - zero) * scale`` in float32 (exact: small integers times fp16 scales), then cast to the
serving dtype.

GPTQ (``quant_method: gptq``, ``checkpoint_format`` gptq or gptq_v2; 2, 4 or 8 bits): ``qweight`` [in * bits / 32,
out] packs consecutive input rows of one column into a word, lowest bits first; ``qzeros`` [groups, out * bits / 32]
packs consecutive columns; ``scales`` [groups, out]; ``g_idx`` [in] gives each input row's group (act order:
``desc_act``; otherwise row // group_size). The gptq format stores each zero point minus one (read back as stored
+ 1, as AutoGPTQ's and vLLM's kernels do); gptq_v2 stores it as it is.

AWQ (``quant_method: awq``, ``version: gemm``, 4 bits): ``qweight`` [in, out / 8] and ``qzeros`` [groups, out / 8]
pack eight columns per word in the order 0, 2, 4, 6, 1, 3, 5, 7; ``scales`` [groups, out]; groups of
``group_size`` input rows.

Both store weights as [in, out]; they are returned as a Linear's [out, in]. Other layouts (Marlin, AWQ's GEMV,
exllama's) and bit widths are refused by name."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

AWQ_PACK_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)
"""The column (within its group of eight) held by each successive 4-bit field of an AWQ word."""
_GPTQ_BITS = (2, 4, 8)
_GPTQ_FORMATS = ("gptq", "gptq_v2")


@dataclass(frozen=True)
class PackedIntWeights:
    """One checkpoint's packing: bits per value, input rows per group (the whole input when None), AWQ's column
    order or GPTQ's, and GPTQ's act order and stored-minus-one zero points."""

    method: str
    bits: int
    group_size: int | None
    awq_order: bool = False
    act_order: bool = False
    zeros_minus_one: bool = False

    @property
    def parts(self) -> tuple[str, ...]:
        return ("qweight", "qzeros", "scales", "g_idx") if self.act_order else ("qweight", "qzeros", "scales")

    @property
    def dropped(self) -> tuple[str, ...]:
        """Without act order ``g_idx`` only restates row // group_size."""
        return () if self.act_order else ("g_idx",)

    def is_part(self, suffix: str, tensor: torch.Tensor) -> bool:
        return suffix in self.parts

    def dequantise_parts(self, parts: dict[str, torch.Tensor], name: str) -> torch.Tensor:
        """The float32 [out, in] weight of one module's packed parts; ValueError naming it when they disagree."""
        words, zero_words, scales = parts["qweight"], parts["qzeros"], parts["scales"].float()
        per_word = 32 // self.bits
        if words.dtype != torch.int32 or zero_words.dtype != torch.int32:
            raise ValueError(f"weights: {name!r}: qweight and qzeros must be int32 words, got {words.dtype} and "
                             f"{zero_words.dtype}")
        if self.awq_order:
            values = _unpack_columns(words, self.bits, AWQ_PACK_ORDER)
            zeros = _unpack_columns(zero_words, self.bits, AWQ_PACK_ORDER)
        else:
            values = _unpack_rows(words, self.bits)
            zeros = _unpack_columns(zero_words, self.bits, tuple(range(per_word)))
            if self.zeros_minus_one:
                zeros = zeros + 1
        in_features, out_features = values.shape
        groups = self._groups(parts.get("g_idx"), in_features, name)
        if zeros.shape != scales.shape or scales.shape[1] != out_features or scales.shape[0] <= int(groups.max()):
            raise ValueError(f"weights: {name!r}: qweight unpacks to [{in_features}, {out_features}] but qzeros to "
                             f"{list(zeros.shape)} and scales are {list(scales.shape)}")
        return ((values - zeros[groups]).float() * scales[groups]).t().contiguous()

    def _groups(self, g_idx: torch.Tensor | None, in_features: int, name: str) -> torch.Tensor:
        """Each input row's group."""
        if g_idx is not None:
            if tuple(g_idx.shape) != (in_features,) or int(g_idx.min()) < 0:
                raise ValueError(f"weights: {name!r}: g_idx must hold a group >= 0 for each of {in_features} input "
                                 f"rows, got shape {list(g_idx.shape)}")
            return g_idx.long()
        rows = torch.arange(in_features)
        return rows // self.group_size if self.group_size else torch.zeros_like(rows)


def word_fields(words: torch.Tensor, bits: int) -> torch.Tensor:
    """[..., 32 / bits] the fields of each int32 word, lowest bits first, as non-negative integers."""
    shifts = torch.arange(0, 32, bits, dtype=torch.int32)
    return (words.unsqueeze(-1) >> shifts) & ((1 << bits) - 1)


def _unpack_rows(words: torch.Tensor, bits: int) -> torch.Tensor:
    """GPTQ's qweight: word [r, c] holds rows r * n ... r * n + n - 1 of column c; -> [rows, columns]."""
    fields = word_fields(words, bits)  # [r, c, n]
    return fields.permute(0, 2, 1).reshape(-1, words.shape[1])


def _unpack_columns(words: torch.Tensor, bits: int, order: tuple[int, ...]) -> torch.Tensor:
    """Word [r, c] holds columns c * n + order[i] in its field i; -> [rows, columns]."""
    fields = word_fields(words, bits)  # [r, c, n]
    columns = torch.empty_like(fields)
    columns[..., list(order)] = fields
    return columns.reshape(words.shape[0], -1)


def gptq_weights(settings: dict[str, Any]) -> PackedIntWeights:
    """The packing of a GPTQ ``quantization_config``; ValueError naming the field it cannot serve."""
    bits = settings.get("bits")
    if bits not in _GPTQ_BITS:
        raise ValueError(f"quantization_config.bits: GPTQ checkpoints of {', '.join(map(str, _GPTQ_BITS))} bits are "
                         f"served, got {bits!r}")
    storage = settings.get("checkpoint_format") or "gptq"
    if storage not in _GPTQ_FORMATS:
        raise ValueError(f"quantization_config.checkpoint_format: {storage!r} is not served "
                         f"({', '.join(_GPTQ_FORMATS)})")
    return PackedIntWeights("gptq", int(bits), _group_size(settings), act_order=bool(settings.get("desc_act")),
                            zeros_minus_one=storage == "gptq")


def awq_weights(settings: dict[str, Any]) -> PackedIntWeights:
    """The packing of an AWQ ``quantization_config`` (GEMM layout, 4 bits, zero points)."""
    bits = settings.get("bits", settings.get("w_bit"))
    if bits != 4:
        raise ValueError(f"quantization_config.bits: AWQ checkpoints of 4 bits are served, got {bits!r}")
    version = str(settings.get("version", "gemm")).lower()
    if version != "gemm":
        raise ValueError(f"quantization_config.version: AWQ's {version!r} layout is not served (gemm)")
    if settings.get("zero_point") is False:
        raise ValueError("quantization_config.zero_point: AWQ without zero points is not served")
    return PackedIntWeights("awq", 4, _group_size(settings, "q_group_size"), awq_order=True)


def _group_size(settings: dict[str, Any], alias: str = "group_size") -> int | None:
    size = settings.get("group_size", settings.get(alias))
    if size in (None, -1):
        return None
    if not isinstance(size, int) or size < 1:
        raise ValueError(f"quantization_config.group_size: must be a positive integer or -1, got {size!r}")
    return size
