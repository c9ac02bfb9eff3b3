"""The served adapters stacked into each layer's projections (LoraProjection), in this rank's shard, one slot each.

The stacks are allocated once for a fixed number of slots and rank and written in place, so an adapter loaded or
unloaded while the executor serves changes no tensor's address (captured CUDA graphs keep reading them).

Under tensor parallelism a column-parallel projection (qkv, gate/up) keeps every adapter's whole A and the rows of
B its own output rows need; a row-parallel one (o, down) keeps the columns of A its input holds and the whole B, so
its partial updates add up over ranks in the same all-reduce as the base projection's partial outputs."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import cast

import torch

from executor_svc.lora.adapter_files import PROJECTIONS, LoraAdapter
from executor_svc.lora.projection import LoraProjection
from executor_svc.models.llama import LlamaAttention, LlamaDecoderLayer, LlamaMLP, LlamaModelForCausalLM
from executor_svc.models.moe import SparseMoeBlock


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


@dataclass(frozen=True)
class _Stack:
    """One layer's stacked projection and the checkpoint projections it fuses."""

    layer: int
    parts: list[_Part]
    projection: LoraProjection


class LoraStack:
    """Every layer's stacked adapters: ``num_slots`` slots of rank up to ``rank`` each, all zero until written."""

    def __init__(self, model: LlamaModelForCausalLM, num_slots: int, rank: int,
                 projections: Collection[str] = PROJECTIONS) -> None:
        """Stacks the fused projections holding any of ``projections`` (the others get none: no adapter may adapt
        them) and installs them in the model's layers; sets ``model.lora_num_slots`` and ``model.lora_rank``."""
        if num_slots < 1 or rank < 1:
            raise ValueError(f"lora: need at least one slot of rank >= 1, got {num_slots} slots of rank {rank}")
        if model.variant.mla is not None:
            raise ValueError(f"lora: LoRA adapters of latent-attention models ({model.config.model_type}) are not "
                             "supported")
        self.model = model
        self.num_slots = num_slots
        self.rank = rank
        self.projections = frozenset(projections)
        self._stacks: list[_Stack] = []
        like = model.embed_weight
        for index, module in enumerate(model.layers):
            layer: LlamaDecoderLayer = module  # type: ignore[assignment]
            for attribute, owner, parts, fused in _layer_parts(cast(LlamaAttention, layer.attn), layer.mlp):
                if not any(part.projection in self.projections for part in parts):
                    continue
                columns = len(parts) * num_slots * rank
                projection = LoraProjection(
                    torch.zeros(columns, fused.shape[1], dtype=like.dtype, device=like.device),
                    torch.zeros(fused.shape[0], columns, dtype=like.dtype, device=like.device),
                    len(parts),
                )
                setattr(owner, attribute, projection)
                self._stacks.append(_Stack(index, parts, projection))
        model.lora_num_slots = num_slots
        model.lora_rank = rank

    def write(self, slot: int, adapter: LoraAdapter) -> None:
        """Put ``adapter`` in ``slot`` (whatever was there is replaced); ValueError naming the adapter when its rank
        or projections do not fit the stacks."""
        if adapter.rank > self.rank:
            raise ValueError(f"lora adapter {adapter.name!r}: rank {adapter.rank} is above the executor's "
                             f"--max-lora-rank {self.rank}")
        outside = sorted({projection for _, projection in adapter.modules} - self.projections)
        if outside:
            raise ValueError(f"lora adapter {adapter.name!r}: adapts {outside}, which this executor's stacks do not "
                             "hold (start it with --max-loras above its --lora-modules count to stack every "
                             "projection)")
        self.clear(slot)
        for stack in self._stacks:
            for p, part in enumerate(stack.parts):
                module = adapter.modules.get((stack.layer, part.projection))
                if module is not None:
                    self._write_part(stack.projection, p, slot, part, module.a.float(),
                                     module.b.float() * module.scaling)

    def clear(self, slot: int) -> None:
        """Zero ``slot`` in every stack: a row naming it gets an update of exactly zero."""
        with torch.no_grad():
            for stack in self._stacks:
                for p in range(len(stack.parts)):
                    first = self._first_column(p, slot)
                    stack.projection.shrink[first : first + self.rank] = 0
                    stack.projection.expand[:, first : first + self.rank] = 0

    def _first_column(self, part: int, slot: int) -> int:
        return (part * self.num_slots + slot) * self.rank

    def _write_part(self, projection: LoraProjection, p: int, slot: int, part: _Part, a: torch.Tensor,
                    scaled_b: torch.Tensor) -> None:
        if part.checkpoint_columns is not None:
            a = a[:, part.checkpoint_columns[0] : part.checkpoint_columns[1]]
        if part.checkpoint_rows is not None:
            scaled_b = scaled_b[part.checkpoint_rows[0] : part.checkpoint_rows[1]]
        first, rank = self._first_column(p, slot), a.shape[0]
        with torch.no_grad():
            projection.shrink[first : first + rank] = a.to(projection.shrink)
            projection.expand[part.local_rows[0] : part.local_rows[1], first : first + rank] = scaled_b.to(
                projection.expand)


def stack_adapters(model: LlamaModelForCausalLM, adapters: list[LoraAdapter], num_slots: int | None = None,
                   rank: int | None = None) -> LoraStack | None:
    """The stacks for ``adapters`` (slot i is adapters[i]) with room for ``num_slots`` in all (None: just them) of
    rank ``rank`` (None: theirs). With no spare slot only the projections they adapt are stacked; with spare slots,
    every projection (an adapter loaded later may adapt any). None when there is no slot at all."""
    num_slots = len(adapters) if num_slots is None else num_slots
    if num_slots == 0:
        return None
    if num_slots < len(adapters):
        raise ValueError(f"max_loras: {num_slots} slots cannot hold the {len(adapters)} --lora-modules")
    rank = rank or max((adapter.rank for adapter in adapters), default=16)
    spare = num_slots > len(adapters)
    adapted = {projection for adapter in adapters for _, projection in adapter.modules}
    stack = LoraStack(model, num_slots, rank, PROJECTIONS if spare else adapted)
    for slot, adapter in enumerate(adapters):
        stack.write(slot, adapter)
    return stack


def _layer_parts(attn: LlamaAttention, mlp: LlamaMLP | SparseMoeBlock):
    """(attribute, module, parts, base weight) of each adaptable projection of one layer (the attention only for a
    MoE layer or an MLP without a gate, whose projections adapters cannot name)."""
    hd = attn.head_dim
    q_rows, kv_rows = attn.num_heads * hd, attn.num_kv_heads * hd
    q_off, kv_off = attn.head_offset * hd, attn.kv_head_offset * hd
    qkv = [
        _Part("q_proj", (0, q_rows), (q_off, q_off + q_rows)),
        _Part("k_proj", (q_rows, q_rows + kv_rows), (kv_off, kv_off + kv_rows)),
        _Part("v_proj", (q_rows + kv_rows, q_rows + 2 * kv_rows), (kv_off, kv_off + kv_rows)),
    ]
    hidden = attn.o_weight.shape[0]
    o = [_Part("o_proj", (0, hidden), None, (q_off, q_off + q_rows))]
    attention = [("qkv_lora", attn, qkv, attn.qkv_weight), ("o_lora", attn, o, attn.o_weight)]
    if not isinstance(mlp, LlamaMLP) or not mlp.gated:  # routed experts, or an MLP without a gate: not adapted
        return attention
    size, mlp_off = mlp.intermediate_size, mlp.intermediate_offset
    gate_up = [
        _Part("gate_proj", (0, size), (mlp_off, mlp_off + size)),
        _Part("up_proj", (size, 2 * size), (mlp_off, mlp_off + size)),
    ]
    down = [_Part("down_proj", (0, hidden), None, (mlp_off, mlp_off + size))]
    return [*attention, ("gate_up_lora", mlp, gate_up, mlp.gate_up_weight),
            ("down_lora", mlp, down, mlp.down_weight)]
