"""Loading mixture-of-experts tensors: the router and experts of Mixtral, Qwen-MoE and OLMoE (one tensor per expert
projection in checkpoints, stacked in transformers 5's own layout or, as Qwen3-VL-MoE releases store them, stacked as
they multiply), Granite MoE's and Llama 4's stacked experts."""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple, cast

import torch

from executor_svc.models.llama import LlamaMLP, LlamaModelForCausalLM
from executor_svc.models.llama4_settings import LLAMA4_TYPES
from executor_svc.models.moe import SparseMoeBlock
from executor_svc.models.moe_settings import MoeSettings
from executor_svc.models.weight_targets import (
    Target,
    Targets,
    gate_up_halves,
    gated_targets,
    mlp_targets,
    part_target,
    whole_target,
)
from executor_svc.parallel.tensor_parallel import TensorParallel

if TYPE_CHECKING:
    from transformers import PretrainedConfig

# transformers (v5) holds a MoE layer's experts stacked, [experts, 2 * intermediate, hidden] and [experts, hidden,
# intermediate], and Mixtral's under ``mlp.``: GGUF checkpoints arrive so (read through transformers).
_STACKED_EXPERT_SUFFIXES = ("mlp.experts.gate_up_proj", "mlp.experts.down_proj")
_MIXTRAL_ROUTER_SUFFIX = "mlp.gate.weight"
_GRANITE_RENAMES = (("block_sparse_moe.experts.gate_up_proj", "block_sparse_moe.input_linear.weight"),
                    ("block_sparse_moe.experts.down_proj", "block_sparse_moe.output_linear.weight"),
                    ("block_sparse_moe.router.weight", "block_sparse_moe.router.layer.weight"))
_LLAMA4_EXPERT_SUFFIXES = ("feed_forward.experts.gate_up_proj", "feed_forward.experts.down_proj")
_GRANITE_MOE_TYPES = ("granitemoe", "granitemoeshared")
"""model_types whose experts checkpoints store stacked (_granite_moe_targets)."""


def checkpoint_layout(name: str, tensor: torch.Tensor, config: PretrainedConfig, moe: MoeSettings
                      ) -> list[tuple[str, torch.Tensor]] | None:
    """A tensor transformers (v5) names or stacks otherwise than checkpoints do, as the checkpoint's tensors (None:
    already a checkpoint's): Granite MoE's renamed, the other families' stacked experts split per expert."""
    if getattr(config, "model_type", None) in _GRANITE_MOE_TYPES:
        for theirs, ours in _GRANITE_RENAMES:
            if name.endswith(theirs):
                return [(name[: -len(theirs)] + ours, tensor)]
        return None
    if getattr(config, "model_type", None) in LLAMA4_TYPES:
        return _split_llama4_experts(name, tensor, config, moe) if name.endswith(_LLAMA4_EXPERT_SUFFIXES) else None
    mixtral = getattr(config, "model_type", None) == "mixtral"
    if name.endswith(_STACKED_EXPERT_SUFFIXES) or (mixtral and name.endswith(_MIXTRAL_ROUTER_SUFFIX)):
        return _split_stacked_experts(name, tensor, config, moe)
    return None


def _split_stacked_experts(name: str, tensor: torch.Tensor, config: PretrainedConfig, moe: MoeSettings
                           ) -> list[tuple[str, torch.Tensor]]:
    """transformers' stacked expert tensors (and Mixtral's router under ``mlp.``) as the per-expert checkpoint
    names; ValueError naming the tensor when its experts or rows do not add up."""
    names = _moe_names(config)
    gate, up, down = names.projections
    block = name[: name.rindex("mlp.")] + names.block
    if name.endswith(_MIXTRAL_ROUTER_SUFFIX):
        return [(block + "gate.weight", tensor)]
    size = moe.expert_intermediate_size
    gate_up = name.endswith("gate_up_proj")
    rows, columns = (2 * size, config.hidden_size) if gate_up else (config.hidden_size, size)
    if tuple(tensor.shape) == (moe.num_experts, columns, rows) and rows != columns:
        tensor = tensor.transpose(1, 2)  # stacked as they multiply, x @ w: Qwen3-VL-MoE's released checkpoints
    if tuple(tensor.shape) != (moe.num_experts, rows, columns):
        raise ValueError(f"weights: {name!r} has shape {tuple(tensor.shape)}, expected ({moe.num_experts}, {rows}, "
                         f"{columns}) or, stacked as they multiply, ({moe.num_experts}, {columns}, {rows})")
    parts = []
    for expert, weight in enumerate(tensor):
        prefix = f"{block}experts.{expert}."
        if gate_up:
            parts += [(f"{prefix}{gate}.weight", weight[:size]), (f"{prefix}{up}.weight", weight[size:])]
        else:
            parts.append((f"{prefix}{down}.weight", weight))
    return parts


def _split_llama4_experts(name: str, tensor: torch.Tensor, config: PretrainedConfig, moe: MoeSettings
                          ) -> list[tuple[str, torch.Tensor]]:
    """Llama 4's stacked experts, stored as they multiply (``x @ w``): gate_up_proj [experts, hidden, 2 *
    intermediate] (gate columns, then up) and down_proj [experts, intermediate, hidden], as per-expert names."""
    size, hidden = moe.expert_intermediate_size, config.hidden_size
    gate_up = name.endswith("gate_up_proj")
    expected = (moe.num_experts, hidden, 2 * size) if gate_up else (moe.num_experts, size, hidden)
    if tuple(tensor.shape) != expected:
        raise ValueError(f"weights: {name!r} has shape {tuple(tensor.shape)}, expected {expected}")
    prefix = name[: name.rindex("experts.")] + "experts."
    parts = []
    for expert, weight in enumerate(tensor):
        if gate_up:
            parts += [(f"{prefix}{expert}.gate_proj.weight", weight[:, :size].T),
                      (f"{prefix}{expert}.up_proj.weight", weight[:, size:].T)]
        else:
            parts.append((f"{prefix}{expert}.down_proj.weight", weight.T))
    return parts


class _MoeNames(NamedTuple):
    """How a family's checkpoint names a MoE layer's tensors (after the layer's prefix)."""

    block: str
    projections: tuple[str, str, str] = ("gate_proj", "up_proj", "down_proj")
    """Each expert's gate, up and down projections."""
    router: str = "gate."
    ungated_shared_expert: str = "shared_experts."
    """The shared expert without a gate (DeepSeek-style: one MLP as wide as all of them); Qwen's gated one is
    ``shared_expert.`` beside its ``shared_expert_gate``."""
    correction_bias: str = "gate.e_score_correction_bias"
    """The router's score correction bias (DeepSeek-V3 style routing)."""


_MOE_NAMES = {
    "mixtral": _MoeNames("block_sparse_moe.", ("w1", "w3", "w2")),
    "gpt_oss": _MoeNames("mlp.", router="router."),
    "hunyuan_v1_moe": _MoeNames("mlp.", router="gate.wg.", ungated_shared_expert="shared_mlp."),
    "minimax_m2": _MoeNames("block_sparse_moe.", ("w1", "w3", "w2"), correction_bias="e_score_correction_bias"),
    **{model_type: _MoeNames("feed_forward.", router="router.", ungated_shared_expert="shared_expert.")
       for model_type in LLAMA4_TYPES},
}
"""Families naming MoE tensors otherwise than ``mlp.experts.E.gate_proj`` and ``mlp.gate``."""


def _moe_names(config: PretrainedConfig) -> _MoeNames:
    """The checkpoint's names of a MoE layer's tensors."""
    return _MOE_NAMES.get(getattr(config, "model_type", None) or "", _MoeNames("mlp."))


def moe_targets(prefix: str, moe: SparseMoeBlock, model: LlamaModelForCausalLM) -> dict[str, Targets]:
    """The router (and its correction bias), every expert (Mixtral's ``block_sparse_moe.experts.E.w1/w3/w2``, the
    others' ``mlp.experts.E.gate_proj/up_proj/down_proj``, Granite's stacked ones), and the shared expert (Qwen's
    ``shared_expert`` and its gate, DeepSeek-style ``shared_experts``)."""
    settings, tp = moe.settings, model.tp
    if getattr(model.config, "model_type", None) in _GRANITE_MOE_TYPES:
        return _granite_moe_targets(prefix, moe, tp)
    checkpoint_names = _moe_names(model.config)
    block = prefix + checkpoint_names.block
    router = block + checkpoint_names.router
    targets: dict[str, Targets] = {router + "weight": whole_target(moe.router_weight)}
    if moe.router_bias is not None:
        targets[router + "bias"] = whole_target(moe.router_bias)
    bias = moe.router_correction_bias
    if bias is not None and getattr(model.config, "model_type", None) == "ernie4_5_moe":  # stored [1, experts]
        targets[block + "moe_statics.e_score_correction_bias"] = Target(bias.data.view(1, -1), (1, bias.shape[0]))
    elif bias is not None:
        targets[block + checkpoint_names.correction_bias] = whole_target(bias)
    for expert, (gate_up, down) in enumerate(zip(moe.experts_gate_up_weight.data, moe.experts_down_weight.data)):
        names = tuple(f"{block}experts.{expert}.{projection}" for projection in checkpoint_names.projections)
        targets.update(gated_targets(cast(tuple[str, str, str], names), gate_up, down, tp, moe.intermediate_offset,
                                      settings.expert_intermediate_size))
        targets.update(_expert_bias_targets(names, moe, expert))
    shared = moe.shared_expert
    if isinstance(shared, LlamaMLP):
        if moe.shared_expert_gate_weight is not None:  # Qwen's gated one
            targets.update(mlp_targets(block + "shared_expert.", shared, tp))
            targets[block + "shared_expert_gate.weight"] = whole_target(moe.shared_expert_gate_weight)
        else:
            targets.update(mlp_targets(block + checkpoint_names.ungated_shared_expert, shared, tp))
    return targets


def _expert_bias_targets(names: tuple[str, ...], moe: SparseMoeBlock, expert: int) -> dict[str, Targets]:
    """GPT-OSS's per-expert gate, up (this rank's rows) and down biases (whole: rank 0 adds them)."""
    if moe.experts_gate_up_bias is None or moe.experts_down_bias is None:
        return {}
    gate, up, down = names
    size, offset, full = moe.intermediate_size, moe.intermediate_offset, moe.settings.expert_intermediate_size
    bias = moe.experts_gate_up_bias.data[expert]
    return {f"{gate}.bias": part_target(moe.tp, bias[:size], 0, offset, full),
            f"{up}.bias": part_target(moe.tp, bias[size:], 0, offset, full),
            f"{down}.bias": whole_target(moe.experts_down_bias.data[expert])}


def _granite_moe_targets(prefix: str, moe: SparseMoeBlock, tp: TensorParallel) -> dict[str, Targets]:
    """Granite MoE stores its experts stacked: ``input_linear`` [experts, 2 * intermediate (gate, then up), hidden],
    ``output_linear`` [experts, hidden, intermediate], the router as ``router.layer``; Granite MoE shared adds an
    un-gated ``shared_mlp`` with a fused ``input_linear``."""
    block = prefix + "block_sparse_moe."
    full = moe.settings.expert_intermediate_size
    targets: dict[str, Targets] = {
        block + "router.layer.weight": whole_target(moe.router_weight),
        block + "input_linear.weight": gate_up_halves(tp, moe.experts_gate_up_weight.data, 1,
                                                       moe.intermediate_offset, full),
        block + "output_linear.weight": part_target(tp, moe.experts_down_weight.data, 2, moe.intermediate_offset, full),
    }
    shared = moe.shared_expert
    if isinstance(shared, LlamaMLP):
        full_shared, offset = shared.full_intermediate_size, shared.intermediate_offset
        targets[prefix + "shared_mlp.input_linear.weight"] = gate_up_halves(tp, shared.gate_up_weight.data, 0,
                                                                              offset, full_shared)
        targets[prefix + "shared_mlp.output_linear.weight"] = part_target(tp, shared.down_weight.data, 1, offset,
                                                                     full_shared)
    return targets
