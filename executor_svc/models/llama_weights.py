"""Loads HF Llama-family tensors (Phi-3's fused ones split first; MoE experts stacked) into LlamaModelForCausalLM's
fused parameters.

Under tensor parallelism each rank copies its slice of every sharded tensor (heads, MLP rows or columns,
vocabulary rows); the checkpoint's full shapes are still checked. This module depends on the model code,
never the other way round."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

import torch

from executor_svc.models.llama import LlamaAttention, LlamaDecoderLayer, LlamaMLP, LlamaModelForCausalLM
from executor_svc.models.moe import SparseMoeBlock
from executor_svc.models.moe_settings import MoeSettings
from executor_svc.models.variants import head_dim_of
from executor_svc.parallel.tensor_parallel import TensorParallel

if TYPE_CHECKING:
    from transformers import PretrainedConfig

# Tensors some checkpoints carry that the model recomputes or does not need.
_IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)
# Phi-3 checkpoints store these fused; they are split into the Llama names so tensor parallelism slices them alike.
_FUSED_SUFFIXES = ("self_attn.qkv_proj.weight", "mlp.gate_up_proj.weight")
# transformers (v5) holds a MoE layer's experts stacked, [experts, 2 * intermediate, hidden] and [experts, hidden,
# intermediate], and Mixtral's under ``mlp.``: GGUF checkpoints arrive so (read through transformers).
_STACKED_EXPERT_SUFFIXES = ("mlp.experts.gate_up_proj", "mlp.experts.down_proj")
_MIXTRAL_ROUTER_SUFFIX = "mlp.gate.weight"
_GRANITE_RENAMES = (("block_sparse_moe.experts.gate_up_proj", "block_sparse_moe.input_linear.weight"),
                    ("block_sparse_moe.experts.down_proj", "block_sparse_moe.output_linear.weight"),
                    ("block_sparse_moe.router.weight", "block_sparse_moe.router.layer.weight"))
_GRANITE_MOE_TYPES = ("granitemoe", "granitemoeshared")


@dataclass(frozen=True)
class _Target:
    """Where one HF tensor goes: a view into a parameter, the shape the tensor must have, and the slice of it
    this rank holds (dim, start, end; None: all of it)."""

    view: torch.Tensor
    shape: tuple[int, ...]
    part: tuple[int, int, int] | None = None
    offset: float = 0.0
    """Added to the values (in float32, before the cast): Gemma's norms scale by 1 + the stored weight."""

    def take(self, tensor: torch.Tensor) -> torch.Tensor:
        if self.part is not None:
            dim, start, end = self.part
            tensor = tensor.narrow(dim, start, end - start)
        return tensor if self.offset == 0.0 else tensor.float() + self.offset


_Targets = _Target | tuple[_Target, ...]
"""Where one HF tensor goes: one target, or several slices of it (a stacked gate/up tensor under tensor
parallelism)."""


def load_weights(model: LlamaModelForCausalLM, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
    """Copy HF-named tensors into the model's fused parameters; raises ValueError on unknown or missing names."""
    router = WeightRouter(model)
    for name, tensor in weights:
        router.load(name, tensor)
    router.finish()


class WeightRouter:
    """Copies HF-named tensors into a model's parameters and reports unknown, mis-shaped or missing ones."""

    def __init__(self, model: LlamaModelForCausalLM) -> None:
        self.targets = _model_targets(model)
        self.tied = model.tie_word_embeddings
        self.config = model.config
        self.fused_checkpoint = model.variant.fused_checkpoint
        self.moe = model.variant.moe
        self.loaded: set[str] = set()

    def load(self, name: str, tensor: torch.Tensor) -> None:
        """Copy one tensor into its place (cast to the parameter's dtype and device)."""
        if name.endswith(_IGNORED_SUFFIXES) or (self.tied and name == "lm_head.weight"):
            return
        if self.fused_checkpoint and name.endswith(_FUSED_SUFFIXES):
            for part_name, part in _split_fused(name, tensor, self.config):
                self.load(part_name, part)
            return
        if getattr(self.config, "model_type", None) in _GRANITE_MOE_TYPES:
            name = _granite_checkpoint_name(name)
        elif self.moe is not None and _in_transformers_moe_layout(name, self.config):
            for part_name, part in _split_stacked_experts(name, tensor, self.config, self.moe):
                self.load(part_name, part)
            return
        target = self.targets.get(name)
        if target is None:
            raise ValueError(f"weights: unexpected tensor {name!r} for this architecture")
        for slice_target in target if isinstance(target, tuple) else (target,):
            if tuple(tensor.shape) != slice_target.shape:
                raise ValueError(f"weights: {name!r} has shape {tuple(tensor.shape)}, expected {slice_target.shape}")
            with torch.no_grad():
                slice_target.view.copy_(slice_target.take(tensor))
        self.loaded.add(name)

    def finish(self) -> None:
        """Raise ValueError naming the tensors that never arrived."""
        missing = sorted(set(self.targets) - self.loaded)
        if missing:
            shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
            raise ValueError(f"weights: missing tensors {shown}")


def _split_fused(name: str, tensor: torch.Tensor, config: PretrainedConfig) -> list[tuple[str, torch.Tensor]]:
    """A fused Phi-3 tensor as the Llama-named parts it stacks by rows (q, k, v or gate, up); ValueError naming
    the tensor when its rows do not add up."""
    prefix, _, suffix = name.rpartition(".")[0].rpartition(".")
    if suffix == "qkv_proj":
        head_dim = head_dim_of(config)
        sizes = {"q_proj": config.num_attention_heads * head_dim, "k_proj": config.num_key_value_heads * head_dim,
                 "v_proj": config.num_key_value_heads * head_dim}
    else:
        sizes = {"gate_proj": config.intermediate_size, "up_proj": config.intermediate_size}
    if tensor.dim() != 2 or tensor.shape[0] != sum(sizes.values()):
        raise ValueError(f"weights: {name!r} has shape {tuple(tensor.shape)}, expected {sum(sizes.values())} rows")
    parts = tensor.split(list(sizes.values()))
    return [(f"{prefix}.{part}.weight", rows) for part, rows in zip(sizes, parts)]


def _in_transformers_moe_layout(name: str, config: PretrainedConfig) -> bool:
    """Whether ``name`` is one of the stacked expert tensors, or Mixtral's router under ``mlp.``."""
    mixtral = getattr(config, "model_type", None) == "mixtral"
    return name.endswith(_STACKED_EXPERT_SUFFIXES) or (mixtral and name.endswith(_MIXTRAL_ROUTER_SUFFIX))


def _granite_checkpoint_name(name: str) -> str:
    """Granite MoE's checkpoint name of a tensor transformers (v5) names otherwise (its stacked experts and router
    are stored stacked in checkpoints too, under other names)."""
    for theirs, ours in _GRANITE_RENAMES:
        if name.endswith(theirs):
            return name[: -len(theirs)] + ours
    return name


def _split_stacked_experts(name: str, tensor: torch.Tensor, config: PretrainedConfig, moe: MoeSettings
                           ) -> list[tuple[str, torch.Tensor]]:
    """transformers' stacked expert tensors (and Mixtral's router under ``mlp.``) as the per-expert checkpoint
    names; ValueError naming the tensor when its experts or rows do not add up."""
    block_name, (gate, up, down) = _moe_names(config)
    block = name[: name.rindex("mlp.")] + block_name
    if name.endswith(_MIXTRAL_ROUTER_SUFFIX):
        return [(block + "gate.weight", tensor)]
    size = moe.expert_intermediate_size
    gate_up = name.endswith("gate_up_proj")
    rows = 2 * size if gate_up else config.hidden_size
    if tensor.dim() != 3 or tensor.shape[0] != moe.num_experts or tensor.shape[1] != rows:
        raise ValueError(f"weights: {name!r} has shape {tuple(tensor.shape)}, expected ({moe.num_experts}, {rows}, "
                         f"{config.hidden_size if gate_up else size})")
    parts = []
    for expert, weight in enumerate(tensor):
        prefix = f"{block}experts.{expert}."
        if gate_up:
            parts += [(f"{prefix}{gate}.weight", weight[:size]), (f"{prefix}{up}.weight", weight[size:])]
        else:
            parts.append((f"{prefix}{down}.weight", weight))
    return parts


def _model_targets(model: LlamaModelForCausalLM) -> dict[str, _Targets]:
    tp = model.tp
    vocab, offset = model.config.vocab_size, model.vocab_offset
    targets: dict[str, _Targets] = {
        "model.embed_tokens.weight": _part(tp, model.embed_weight.data, 0, offset, vocab),
        f"{model.variant.names.final_norm}.weight": _whole(model.norm_weight, model.variant.norm_weight_offset),
    }
    if model.norm_bias is not None:
        targets[f"{model.variant.names.final_norm}.bias"] = _whole(model.norm_bias)
    if not model.tie_word_embeddings:
        targets["lm_head.weight"] = _part(tp, model.lm_head_weight.data, 0, offset, vocab)
    if model.lm_head_bias is not None:
        targets["lm_head.bias"] = _part(tp, model.lm_head_bias.data, 0, offset, vocab)
    for index, layer in enumerate(model.layers):
        targets.update(_layer_targets(f"model.layers.{index}.", cast(LlamaDecoderLayer, layer), model, tp))
    return targets


def _layer_targets(
    prefix: str, layer: LlamaDecoderLayer, model: LlamaModelForCausalLM, tp: TensorParallel
) -> dict[str, _Targets]:
    config, norm_offset = model.config, model.variant.norm_weight_offset
    attn, mlp = layer.attn, layer.mlp
    hd = attn.head_dim
    q_rows, kv_rows = attn.num_heads * hd, attn.num_kv_heads * hd
    all_q_rows, all_kv_rows = config.num_attention_heads * hd, config.num_key_value_heads * hd
    q_offset, kv_offset = attn.head_offset * hd, attn.kv_head_offset * hd
    qkv_parts = {  # rows of the fused parameter, and where this rank's rows sit in the checkpoint tensor
        "q_proj": (0, q_rows, q_offset, all_q_rows),
        "k_proj": (q_rows, q_rows + kv_rows, kv_offset, all_kv_rows),
        "v_proj": (q_rows + kv_rows, q_rows + 2 * kv_rows, kv_offset, all_kv_rows),
    }
    names = model.variant.names
    targets: dict[str, _Targets] = {
        f"{prefix}{names.o_proj}.weight": _part(tp, attn.o_weight.data, 1, q_offset, all_q_rows),
    }
    if layer.input_norm_weight is not None:
        targets[prefix + "input_layernorm.weight"] = _whole(layer.input_norm_weight, norm_offset)
    if layer.input_norm_bias is not None:
        targets[prefix + "input_layernorm.bias"] = _whole(layer.input_norm_bias)
    if isinstance(mlp, SparseMoeBlock) and getattr(config, "model_type", None) in _GRANITE_MOE_TYPES:
        targets.update(_granite_moe_targets(prefix, mlp, tp))
    elif isinstance(mlp, SparseMoeBlock):
        targets.update(_moe_targets(prefix, mlp, model))
    else:
        targets.update(_mlp_targets(prefix, mlp, tp, config.intermediate_size,
                                    (names.mlp_gate, names.mlp_up, names.mlp_down)))
    targets.update(_norm_targets(prefix, layer, norm_offset, model.variant.norm_names))
    if layer.post_attention_norm_bias is not None:
        targets[prefix + "post_attention_layernorm.bias"] = _whole(layer.post_attention_norm_bias)
    for part, (start, end, offset, full) in qkv_parts.items():
        targets[f"{prefix}self_attn.{part}.weight"] = _part(tp, attn.qkv_weight.data[start:end], 0, offset, full)
        if attn.qkv_bias is not None:
            targets[f"{prefix}self_attn.{part}.bias"] = _part(tp, attn.qkv_bias.data[start:end], 0, offset, full)
    if attn.o_bias is not None:
        targets[f"{prefix}{names.o_proj}.bias"] = _whole(attn.o_bias)
    targets.update(_qk_norm_targets(prefix, attn, config, norm_offset))
    return targets


def _qk_norm_targets(prefix: str, attn: LlamaAttention, config: PretrainedConfig, norm_offset: float
                     ) -> dict[str, _Targets]:
    """The q and k norms' weights: OLMo's over all heads, Cohere's per head, else one row every head shares."""
    tp = attn.tp
    hd = attn.head_dim
    q_offset, kv_offset = attn.head_offset * hd, attn.kv_head_offset * hd
    all_q_rows, all_kv_rows = config.num_attention_heads * hd, config.num_key_value_heads * hd
    targets: dict[str, _Targets] = {}
    if attn.qk_norm_weight is not None and attn.qk_norm_full_width:
        # OLMo: one weight per feature of all q heads ([heads * head_dim]), and of all k heads; this rank's slices.
        q_rows, k_rows = attn.qk_norm_weight.data[: attn.num_heads], attn.qk_norm_weight.data[attn.num_heads :]
        targets[prefix + "self_attn.q_norm.weight"] = _part(tp, q_rows.view(-1), 0, q_offset, all_q_rows)
        targets[prefix + "self_attn.k_norm.weight"] = _part(tp, k_rows.view(-1), 0, kv_offset, all_kv_rows)
    elif attn.qk_norm_weight is not None and attn.qk_norm_per_head:
        # Cohere: [heads, head_dim] weights; this rank's heads' rows.
        q_rows, k_rows = attn.qk_norm_weight.data[: attn.num_heads], attn.qk_norm_weight.data[attn.num_heads :]
        targets[prefix + "self_attn.q_norm.weight"] = _part(tp, q_rows, 0, attn.head_offset,
                                                            config.num_attention_heads)
        targets[prefix + "self_attn.k_norm.weight"] = _part(tp, k_rows, 0, attn.kv_head_offset,
                                                            config.num_key_value_heads)
    elif attn.qk_norm_weight is not None:
        head_dim = (attn.head_dim,)
        q_rows, k_rows = attn.qk_norm_weight.data[: attn.num_heads], attn.qk_norm_weight.data[attn.num_heads :]
        targets[prefix + "self_attn.q_norm.weight"] = _Target(q_rows, head_dim, offset=norm_offset)
        targets[prefix + "self_attn.k_norm.weight"] = _Target(k_rows, head_dim, offset=norm_offset)
    return targets


def _mlp_targets(prefix: str, mlp: LlamaMLP, tp: TensorParallel, full_size: int,
                 names: tuple[str | None, str, str] = ("gate_proj", "up_proj", "down_proj")) -> dict[str, _Targets]:
    """An MLP's projections (``names`` after ``prefix``: gate, None without a gate, up and down) and their biases
    into its fused gate/up and its down projection; ``full_size``: the checkpoint's intermediate rows."""
    gate, up, down = names
    size, offset = mlp.intermediate_size, mlp.intermediate_offset
    gate_up, bias = mlp.gate_up_weight.data, mlp.gate_up_bias
    targets: dict[str, _Targets]
    if gate is None:  # no gate: the fused parameter holds the up projection alone
        targets = {f"{prefix}{up}.weight": _part(tp, gate_up, 0, offset, full_size),
                   f"{prefix}{down}.weight": _part(tp, mlp.down_weight.data, 1, offset, full_size)}
        if bias is not None:
            targets[f"{prefix}{up}.bias"] = _part(tp, bias.data, 0, offset, full_size)
    else:
        targets = dict(_gated_targets((prefix + gate, prefix + up, prefix + down), gate_up, mlp.down_weight.data, tp,
                                      offset, full_size))
        if bias is not None:
            targets[f"{prefix}{gate}.bias"] = _part(tp, bias.data[:size], 0, offset, full_size)
            targets[f"{prefix}{up}.bias"] = _part(tp, bias.data[size:], 0, offset, full_size)
    if mlp.down_bias is not None:
        targets[f"{prefix}{down}.bias"] = _whole(mlp.down_bias)
    return targets


def _gated_targets(names: tuple[str, str, str], gate_up: torch.Tensor, down: torch.Tensor, tp: TensorParallel,
                   offset: int, full_size: int) -> dict[str, _Target]:
    """The checkpoint's gate, up and down tensors (``names``, without ``.weight``) into a fused gate/up [2 * size,
    hidden] and a down [hidden, size] holding rows ``offset`` on of ``full_size``."""
    size = down.shape[1]
    gate, up, down_name = names
    return {
        f"{gate}.weight": _part(tp, gate_up[:size], 0, offset, full_size),
        f"{up}.weight": _part(tp, gate_up[size:], 0, offset, full_size),
        f"{down_name}.weight": _part(tp, down, 1, offset, full_size),
    }


def _moe_names(config: PretrainedConfig) -> tuple[str, tuple[str, str, str]]:
    """The checkpoint's name of a MoE layer's block, and of each expert's gate, up and down projections."""
    if getattr(config, "model_type", None) == "mixtral":
        return "block_sparse_moe.", ("w1", "w3", "w2")
    return "mlp.", ("gate_proj", "up_proj", "down_proj")


def _moe_targets(prefix: str, moe: SparseMoeBlock, model: LlamaModelForCausalLM) -> dict[str, _Targets]:
    """The router and every expert (Mixtral's ``block_sparse_moe.experts.E.w1/w3/w2``, Qwen's
    ``mlp.experts.E.gate_proj/up_proj/down_proj``), and Qwen2-MoE's shared expert and its gate."""
    settings, tp = moe.settings, model.tp
    block_name, projections = _moe_names(model.config)
    block = prefix + block_name
    targets: dict[str, _Targets] = {block + "gate.weight": _whole(moe.router_weight)}
    for expert, (gate_up, down) in enumerate(zip(moe.experts_gate_up_weight.data, moe.experts_down_weight.data)):
        names = tuple(f"{block}experts.{expert}.{projection}" for projection in projections)
        targets.update(_gated_targets(cast(tuple[str, str, str], names), gate_up, down, tp, moe.intermediate_offset,
                                      settings.expert_intermediate_size))
    shared = moe.shared_expert
    if isinstance(shared, LlamaMLP) and moe.shared_expert_gate_weight is not None:
        full_shared = settings.shared_expert_intermediate_size or 0
        targets.update(_mlp_targets(block + "shared_expert.", shared, tp, full_shared))  # Qwen's names
        targets[block + "shared_expert_gate.weight"] = _whole(moe.shared_expert_gate_weight)
    return targets


def _granite_moe_targets(prefix: str, moe: SparseMoeBlock, tp: TensorParallel) -> dict[str, _Targets]:
    """Granite MoE stores its experts stacked: ``input_linear`` [experts, 2 * intermediate (gate, then up), hidden],
    ``output_linear`` [experts, hidden, intermediate], the router as ``router.layer``; Granite MoE shared adds an
    un-gated ``shared_mlp`` with a fused ``input_linear``."""
    block = prefix + "block_sparse_moe."
    full = moe.settings.expert_intermediate_size
    targets: dict[str, _Targets] = {
        block + "router.layer.weight": _whole(moe.router_weight),
        block + "input_linear.weight": _gate_up_halves(tp, moe.experts_gate_up_weight.data, 1,
                                                       moe.intermediate_offset, full),
        block + "output_linear.weight": _part(tp, moe.experts_down_weight.data, 2, moe.intermediate_offset, full),
    }
    shared = moe.shared_expert
    if isinstance(shared, LlamaMLP):
        full_shared = moe.settings.shared_expert_intermediate_size or 0
        offset = shared.intermediate_offset
        targets[prefix + "shared_mlp.input_linear.weight"] = _gate_up_halves(tp, shared.gate_up_weight.data, 0,
                                                                              offset, full_shared)
        targets[prefix + "shared_mlp.output_linear.weight"] = _part(tp, shared.down_weight.data, 1, offset,
                                                                     full_shared)
    return targets


def _gate_up_halves(tp: TensorParallel, view: torch.Tensor, dim: int, offset: int, full: int) -> _Targets:
    """The target(s) of a checkpoint tensor stacking gate then up rows (``full`` each) along ``dim`` into ``view``,
    which holds this rank's gate rows then its up rows: under tensor parallelism, one slice of each half."""
    if not tp.enabled:
        return _Target(view, tuple(view.shape))
    size = view.shape[dim] // 2
    shape = list(view.shape)
    shape[dim] = 2 * full
    gate, up = view.narrow(dim, 0, size), view.narrow(dim, size, size)
    return (_Target(gate, tuple(shape), (dim, offset, offset + size)),
            _Target(up, tuple(shape), (dim, full + offset, full + offset + size)))


def _norm_targets(prefix: str, layer: LlamaDecoderLayer, offset: float, sandwich_names: tuple[str, str, str]
                  ) -> dict[str, _Target]:
    """The layer's norms after the input one: Llama's post_attention_layernorm is the MLP's input norm; with
    sandwich norms, ``sandwich_names`` name the attention output's, the MLP input's (OLMo 2 has none) and the MLP
    output's (Gemma 2 and 3: post_attention_layernorm, pre_feedforward_layernorm, post_feedforward_layernorm)."""
    mlp_input, attention_out, mlp_out = (layer.post_attention_norm_weight, layer.attention_out_norm_weight,
                                         layer.mlp_out_norm_weight)
    targets = {}
    if attention_out is None or mlp_out is None:
        if mlp_input is not None:
            targets[prefix + "post_attention_layernorm.weight"] = _whole(mlp_input, offset)
        return targets
    attention_out_name, mlp_input_name, mlp_out_name = sandwich_names
    targets[f"{prefix}{attention_out_name}.weight"] = _whole(attention_out, offset)
    targets[f"{prefix}{mlp_out_name}.weight"] = _whole(mlp_out, offset)
    if mlp_input is not None:
        targets[f"{prefix}{mlp_input_name}.weight"] = _whole(mlp_input, offset)
    return targets


def _whole(param: torch.Tensor, offset: float = 0.0) -> _Target:
    return _Target(param.data, tuple(param.shape), offset=offset)


def _part(tp: TensorParallel, view: torch.Tensor, dim: int, offset: int, full: int) -> _Target:
    """The target for ``view``, which holds [offset, offset + its size) along ``dim`` of a checkpoint tensor of
    size ``full`` there (all of it without tensor parallelism)."""
    if not tp.enabled:
        return _Target(view, tuple(view.shape))
    shape = list(view.shape)
    shape[dim] = full
    return _Target(view, tuple(shape), (dim, offset, offset + view.shape[dim]))
