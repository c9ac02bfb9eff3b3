"""Checkpoints whose linear weights are stored quantised, served by dequantising them as they load.

8-bit weights with scales (this module): ``quant_method`` ``fp8`` (transformers' fine-grained FP8: DeepSeek-V3/R1,
Qwen3 and GLM FP8 releases; a ``weight_scale_inv`` per block of ``weight_block_size``, per channel or per tensor,
float or ue8m0 bytes), ``fbgemm_fp8`` (a ``weight_scale`` per output channel) and ``compressed-tensors`` 8-bit
formats (``float-quantized``, ``naive-quantized``, ``int-quantized``: symmetric FP8 or int8 weights with a
``weight_scale`` per tensor, channel, group or block). A weight is ``q * scale`` with each scale spread over its
block, computed in float32 as transformers' own dequantisation does, then cast to the serving dtype, so outputs
equal HF's dequantised model. Activation and KV-cache scales are dropped (activations and the cache stay in the
serving dtype). GPTQ and AWQ integers packed in int32 words: packed_int_weights.py. GPT-OSS's MXFP4 experts:
gpt_oss_weights.py; compressed-tensors' 4- and 8-bit integers packed in int32 words (``pack-quantized``) here too.
Every other method (bitsandbytes, HQQ, FP4, ...) is refused by name before anything loads."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch

from executor_svc.models.packed_int_weights import awq_weights, gptq_weights, word_fields

_FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2, torch.float8_e4m3fnuz, torch.float8_e5m2fnuz)
_DROPPED_SUFFIXES = (".input_scale", ".activation_scale", ".input_scale_ub", ".k_scale", ".v_scale", ".q_scale",
                     ".output_scale")
"""Scales of activations and of an FP8 KV cache: serving keeps both in its own dtype."""
_COMPRESSED_TENSORS_FORMATS = ("float-quantized", "naive-quantized", "int-quantized")
_COMPRESSED_TENSORS_STRATEGIES = ("tensor", "channel", "group", "block")
_UNPACKED_ELSEWHERE = {"mxfp4": "gpt_oss"}
"""quant_method: the model type whose own loader unpacks it."""


class WeightScheme(Protocol):
    """How one quantised weight is stored: the tensors (suffixes beside the module's name) that together make it,
    and how they become the float32 weight."""

    @property
    def method(self) -> str: ...

    @property
    def parts(self) -> tuple[str, ...]: ...

    @property
    def dropped(self) -> tuple[str, ...]: ...

    def is_part(self, suffix: str, tensor: torch.Tensor) -> bool: ...

    def dequantise_parts(self, parts: dict[str, torch.Tensor], name: str) -> torch.Tensor: ...


@dataclass(frozen=True)
class ScaledWeights:
    """8-bit weights with scales: the suffix of each weight's scale tensor (beside ``weight``) and the block a 2-D
    scale grid covers when the config names one."""

    method: str
    scale_suffix: str
    block: tuple[int, int] | None = None
    exponent_scales: bool = False
    """ue8m0 scales stored as bytes: the scale is 2 ** (byte - 127)."""
    integer_weights: bool = False
    """int8 weights are values (compressed-tensors' int-quantized), not FP4 pairs packed in bytes."""

    @property
    def parts(self) -> tuple[str, ...]:
        return "weight", self.scale_suffix

    @property
    def dropped(self) -> tuple[str, ...]:
        return ()

    def is_part(self, suffix: str, tensor: torch.Tensor) -> bool:
        """A scale, or a weight held quantised (an unquantised ``weight``, such as the LM head's, loads as it is)."""
        return suffix == self.scale_suffix or (suffix == "weight" and is_quantised(tensor))

    def dequantise_parts(self, parts: dict[str, torch.Tensor], name: str) -> torch.Tensor:
        return dequantise(parts["weight"], parts[self.scale_suffix], self, name)


def checkpoint_quantisation(directory: Path) -> WeightScheme | None:
    """The quantisation of the checkpoint in ``directory`` (its config.json's ``quantization_config``), None when
    its weights are not quantised or its model's own loader unpacks them; ValueError naming the field for a
    method that is not served."""
    path = directory / "config.json"
    document = json.loads(path.read_text()) if path.is_file() else {}
    settings = document.get("quantization_config")
    if not settings:
        return None
    return weight_quantisation(settings, document.get("model_type"))


def weight_quantisation(settings: dict[str, Any], model_type: str | None) -> WeightScheme | None:
    """The WeightScheme of a ``quantization_config`` dict (see checkpoint_quantisation)."""
    method = settings.get("quant_method")
    if _UNPACKED_ELSEWHERE.get(str(method)) == model_type:
        return None
    if method == "fp8":
        block = settings.get("weight_block_size")
        return ScaledWeights("fp8", "weight_scale_inv", _block(block, "weight_block_size"),
                             exponent_scales=settings.get("scale_fmt") == "ue8m0")
    if method == "fbgemm_fp8":
        return ScaledWeights("fbgemm_fp8", "weight_scale")
    if method == "compressed-tensors":
        return _compressed_tensors(settings)
    if method == "gptq":
        return gptq_weights(settings)
    if method == "awq":
        return awq_weights(settings)
    raise ValueError(f"quantization_config.quant_method: {method!r} checkpoints are not served (fp8, fbgemm_fp8, "
                     "compressed-tensors, gptq and awq are dequantised at load; use one of those or an unquantised "
                     "checkpoint)")


def _block(value: Any, field_name: str) -> tuple[int, int] | None:
    if value is None:
        return None
    if not (isinstance(value, (list, tuple)) and len(value) == 2 and all(isinstance(v, int) and v > 0 for v in value)):
        raise ValueError(f"quantization_config.{field_name}: must be two positive integers, got {value!r}")
    return int(value[0]), int(value[1])


def _compressed_tensors(settings: dict[str, Any]) -> WeightScheme:
    """compressed-tensors: 8-bit symmetric weights (the block of a ``block`` strategy), or 4/8-bit integers packed in
    int32 words (``pack-quantized``)."""
    storage = settings.get("format")
    if storage not in (*_COMPRESSED_TENSORS_FORMATS, "pack-quantized"):
        raise ValueError(f"quantization_config.format: compressed-tensors {storage!r} is not served "
                         f"({', '.join(_COMPRESSED_TENSORS_FORMATS)}, pack-quantized)")
    packed = storage == "pack-quantized"
    blocks, widths = set(), set()
    for group_name, group in (settings.get("config_groups") or {}).items():
        weights = group.get("weights") or {}
        field = f"quantization_config.config_groups.{group_name}.weights"
        served, kinds = ((4, 8), ("int",)) if packed else ((8,), ("float", "int"))
        if weights.get("num_bits") not in served or weights.get("type") not in kinds:
            raise ValueError(f"{field}: {storage} serves {' or '.join(map(str, served))}-bit {' or '.join(kinds)} "
                             f"weights, got {weights.get('num_bits')}-bit {weights.get('type')}")
        if weights.get("symmetric") is False:
            raise ValueError(f"{field}.symmetric: asymmetric weights (zero points) are not served")
        if weights.get("strategy") not in _COMPRESSED_TENSORS_STRATEGIES:
            raise ValueError(f"{field}.strategy: {weights.get('strategy')!r} is not served "
                             f"({', '.join(_COMPRESSED_TENSORS_STRATEGIES)})")
        if weights.get("actorder") == "group":
            raise ValueError(f"{field}.actorder: group act order (a weight_g_idx per module) is not served")
        blocks.add(_block(weights.get("block_structure"), f"config_groups.{group_name}.weights.block_structure"))
        widths.add(int(weights["num_bits"]))
    block = blocks.pop() if len(blocks) == 1 else None  # several: each scale grid's own division is used
    if packed:
        if len(widths) != 1:
            raise ValueError(f"quantization_config.config_groups: one bit width is served, got {sorted(widths)}")
        return PackedScaledWeights(widths.pop())
    return ScaledWeights("compressed-tensors", "weight_scale", block, integer_weights=True)


@dataclass(frozen=True)
class PackedScaledWeights:
    """compressed-tensors' pack-quantized weights: signed ``bits``-bit integers, offset by 2 ** (bits - 1) and
    packed along each row into int32 words lowest bits first (``weight_packed`` [out, words]), the unpacked shape
    (``weight_shape``) and ``weight_scale`` per channel or group of input columns."""

    bits: int
    method: str = "compressed-tensors"

    @property
    def parts(self) -> tuple[str, ...]:
        return "weight_packed", "weight_scale", "weight_shape"

    @property
    def dropped(self) -> tuple[str, ...]:
        return ()

    def is_part(self, suffix: str, tensor: torch.Tensor) -> bool:
        return suffix in self.parts

    def dequantise_parts(self, parts: dict[str, torch.Tensor], name: str) -> torch.Tensor:
        words, shape = parts["weight_packed"], [int(size) for size in parts["weight_shape"].tolist()]
        per_word = 32 // self.bits
        if words.dtype != torch.int32 or len(shape) != 2 or words.shape[0] != shape[0] \
                or words.shape[1] * per_word < shape[1]:
            raise ValueError(f"weights: {name!r}: weight_packed {list(words.shape)} ({words.dtype}) does not hold "
                             f"weight_shape {shape} in {self.bits}-bit fields")
        values = word_fields(words, self.bits).reshape(shape[0], -1)[:, : shape[1]] - (1 << (self.bits - 1))
        scheme = ScaledWeights(self.method, "weight_scale", integer_weights=True)
        return dequantise(values.to(torch.int8), parts["weight_scale"], scheme, name)


def dequantised(tensors: Iterable[tuple[str, torch.Tensor]], scheme: WeightScheme | None
                ) -> Iterator[tuple[str, torch.Tensor]]:
    """The checkpoint's tensors with the parts of every quantised weight replaced by its float32 ``<module>.weight``
    (yielded once its last part arrives: parts may come in any order and from different files of a sharded
    checkpoint); ValueError naming a module whose parts never all arrived, or a tensor of FP8 or int8 values that is
    no part of a weight the scheme reads (copying it as it is would drop its scale)."""
    dropped = _DROPPED_SUFFIXES + tuple("." + suffix for suffix in (scheme.dropped if scheme else ()))
    pending: dict[str, dict[str, torch.Tensor]] = {}
    for name, tensor in tensors:
        if scheme is not None and name.endswith(dropped):
            continue
        module, _, suffix = name.rpartition(".")
        if scheme is None or not scheme.is_part(suffix, tensor):
            if is_quantised(tensor):
                raise ValueError(f"weights: {name!r} holds {tensor.dtype} values that no scale of "
                                 f"{scheme.method if scheme else 'an unquantised checkpoint'} applies to")
            yield name, tensor
            continue
        parts = pending.setdefault(module, {})
        parts[suffix] = tensor
        if len(parts) == len(scheme.parts):
            yield f"{module}.weight", scheme.dequantise_parts(pending.pop(module), f"{module}.weight")
    if pending and scheme is not None:
        module, parts = sorted(pending.items())[0]
        missing = [part for part in scheme.parts if part not in parts]
        raise ValueError(f"weights: {module!r} has {sorted(parts)} of its {scheme.method} weight but no "
                         f"{', '.join(missing)}")


def is_quantised(tensor: torch.Tensor) -> bool:
    """Whether a checkpoint tensor holds quantised values (FP8 or int8) rather than weights to copy."""
    return tensor.dtype in _FP8_DTYPES or tensor.dtype == torch.int8


def dequantise(weight: torch.Tensor, scale: torch.Tensor, quantisation: ScaledWeights, name: str
               ) -> torch.Tensor:
    """float32 ``weight * scale``, each scale spread over its block of ``weight`` ([..., rows, cols]; stacked
    experts lead with more dimensions). The scale grid is one per tensor ([] or [1]), per row ([rows] or
    [rows, 1]), or [ceil(rows / block_rows), ceil(cols / block_cols)] (the last blocks may be partial, as
    DeepSeek-V3's 576-row latent projection has with blocks of 128)."""
    if weight.dtype == torch.int8 and not quantisation.integer_weights:
        raise ValueError(f"weights: {name!r} holds bytes ({quantisation.method} packs FP4 pairs so): 4-bit weights "
                         "are not served")
    values = weight.float()
    factors = (scale.float() - 127.0).exp2() if quantisation.exponent_scales else scale.float()
    if factors.numel() == 1:
        return values * factors.reshape(())
    if weight.dim() < 2:
        raise ValueError(f"weights: quantised {name!r} has shape {tuple(weight.shape)}; a matrix was expected")
    rows, cols = weight.shape[-2:]
    if factors.dim() == weight.dim() - 1 and factors.shape[-1] == rows:  # one per row, unsqueezed
        factors = factors.unsqueeze(-1)
    if factors.dim() != weight.dim() or factors.shape[:-2] != weight.shape[:-2]:
        raise ValueError(f"weights: {name!r} of shape {tuple(weight.shape)} has a {quantisation.scale_suffix} of "
                         f"shape {tuple(scale.shape)}")
    block_rows, block_cols = _scale_block(rows, cols, factors.shape[-2], factors.shape[-1], quantisation, name)
    spread = factors.repeat_interleave(block_rows, dim=-2)[..., :rows, :]
    spread = spread.repeat_interleave(block_cols, dim=-1)[..., :cols]
    return values * spread


def _scale_block(rows: int, cols: int, grid_rows: int, grid_cols: int, quantisation: ScaledWeights,
                 name: str) -> tuple[int, int]:
    """The block one scale covers: the configured one when the grid is its ceiling division of the weight, else
    the exact division of the weight by the grid."""
    block = quantisation.block
    if block is not None and (math.ceil(rows / block[0]), math.ceil(cols / block[1])) == (grid_rows, grid_cols):
        return block
    if rows % grid_rows == 0 and cols % grid_cols == 0:
        return rows // grid_rows, cols // grid_cols
    raise ValueError(f"weights: {name!r} of shape [{rows}, {cols}] does not divide into its "
                     f"{quantisation.scale_suffix} grid [{grid_rows}, {grid_cols}]"
                     + (f" of {list(block)} blocks" if block else ""))
