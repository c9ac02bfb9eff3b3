"""Stacking the served adapters into each layer's projections (LoraProjection), in this rank's shard.

Under tensor parallelism a column-parallel projection (qkv, gate/up) keeps every adapter's whole A and the rows of
B its own output rows need; a row-parallel one (o, down) keeps the columns of A its input holds and the whole B, so
its partial updates add up over ranks in the same all-reduce as the base projection's partial outputs."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from executor_svc.lora.adapter_files import LoraAdapter
from executor_svc.lora.projection import LoraProjection
from executor_svc.models.llama import LlamaAttention, LlamaDecoderLayer, LlamaMLP, LlamaModelForCausalLM


@dataclass(frozen=True)
class _Part:
    """One checkpoint projection inside a (fused) projection of the model: where its output rows sit in the fused
    projection, and which of the checkpoint's rows of B and columns of A this rank takes."""

    projection: str
    local_rows: tuple[int, int]
    checkpoint_rows: tuple[int, int] | None = None
    """None: all of B's rows."""
    checkpoint_columns: tuple[int, int] | None = None
    """None: all of A's columns."""


def install_adapters(model: LlamaModelForCausalLM, adapters: list[LoraAdapter]) -> None:
    """Give every layer's projections the stacked adapters (slot i is adapters[i]); a projection no adapter
    adapts keeps none. Sets ``model.lora_slots`` and ``model.lora_rank``."""
    if not adapters:
        return
    rank = max(adapter.rank for adapter in adapters)
    weight = model.embed_weight
    for index, module in enumerate(model.layers):
        layer: LlamaDecoderLayer = module  # type: ignore[assignment]
        attn, mlp = layer.attn, layer.mlp
        for attribute, owner, parts, fused in _layer_parts(attn, mlp):
            in_features, out_features = fused.shape[1], fused.shape[0]
            projection = _stack(index, parts, in_features, out_features, adapters, rank, weight)
            setattr(owner, attribute, projection)
    model.lora_slots = tuple(adapter.name for adapter in adapters)
    model.lora_rank = rank


def _layer_parts(attn: LlamaAttention, mlp: LlamaMLP):
    """(attribute, module, parts, base weight) of each adaptable projection of one layer."""
    hd = attn.head_dim
    q_rows, kv_rows = attn.num_heads * hd, attn.num_kv_heads * hd
    q_off, kv_off = attn.head_offset * hd, attn.kv_head_offset * hd
    size, mlp_off = mlp.intermediate_size, mlp.intermediate_offset
    qkv = [
        _Part("q_proj", (0, q_rows), (q_off, q_off + q_rows)),
        _Part("k_proj", (q_rows, q_rows + kv_rows), (kv_off, kv_off + kv_rows)),
        _Part("v_proj", (q_rows + kv_rows, q_rows + 2 * kv_rows), (kv_off, kv_off + kv_rows)),
    ]
    hidden = attn.o_weight.shape[0]
    o = [_Part("o_proj", (0, hidden), None, (q_off, q_off + q_rows))]
    gate_up = [
        _Part("gate_proj", (0, size), (mlp_off, mlp_off + size)),
        _Part("up_proj", (size, 2 * size), (mlp_off, mlp_off + size)),
    ]
    down = [_Part("down_proj", (0, hidden), None, (mlp_off, mlp_off + size))]
    return [
        ("qkv_lora", attn, qkv, attn.qkv_weight),
        ("o_lora", attn, o, attn.o_weight),
        ("gate_up_lora", mlp, gate_up, mlp.gate_up_weight),
        ("down_lora", mlp, down, mlp.down_weight),
    ]


def _stack(layer: int, parts: list[_Part], in_features: int, out_features: int, adapters: list[LoraAdapter],
           rank: int, like: torch.Tensor) -> LoraProjection | None:
    """The stacked projection of one layer's parts, or None when no adapter adapts any of them."""
    columns = len(parts) * len(adapters) * rank
    shrink = torch.zeros(columns, in_features, dtype=torch.float32)
    expand = torch.zeros(out_features, columns, dtype=torch.float32)
    adapted = False
    for p, part in enumerate(parts):
        for slot, adapter in enumerate(adapters):
            module = adapter.modules.get((layer, part.projection))
            if module is None:
                continue
            adapted = True
            a, b = module.a.float(), module.b.float()
            if part.checkpoint_columns is not None:
                a = a[:, part.checkpoint_columns[0] : part.checkpoint_columns[1]]
            if part.checkpoint_rows is not None:
                b = b[part.checkpoint_rows[0] : part.checkpoint_rows[1]]
            first = (p * len(adapters) + slot) * rank
            shrink[first : first + module.rank] = a
            expand[part.local_rows[0] : part.local_rows[1], first : first + module.rank] = b * module.scaling
    if not adapted:
        return None
    return LoraProjection(shrink.to(like), expand.to(like), len(parts))
