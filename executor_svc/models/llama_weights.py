"""Loads HF Llama-family tensors (Phi-3's fused ones split first; MoE experts: moe_weights.py) into
LlamaModelForCausalLM's fused parameters.

Under tensor parallelism each rank copies its slice of every sharded tensor (heads, MLP rows or columns,
vocabulary rows); the checkpoint's full shapes are still checked. This module depends on the model code,
never the other way round."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, cast

import torch

from executor_svc.models.gpt_oss_weights import GptOssExpertLayout
from executor_svc.models.llama import LlamaAttention, LlamaDecoderLayer, LlamaModelForCausalLM
from executor_svc.models.mla import MlaAttention
from executor_svc.models.mla_weights import mla_targets
from executor_svc.models.moe import SparseMoeBlock
from executor_svc.models.moe_weights import checkpoint_layout, moe_targets
from executor_svc.models.variants import head_dim_of
from executor_svc.models.weight_targets import Target, Targets, mlp_targets, part_target, whole_target
from executor_svc.parallel.tensor_parallel import TensorParallel

if TYPE_CHECKING:
    from transformers import PretrainedConfig

# Tensors some checkpoints carry that the model recomputes or does not need.
_IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)
# Phi-3 checkpoints store these fused; they are split into the Llama names so tensor parallelism slices them alike.
_FUSED_SUFFIXES = ("self_attn.qkv_proj.weight", "mlp.gate_up_proj.weight")


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
        self.gpt_oss = GptOssExpertLayout(model.config) if getattr(model.config, "model_type", None) == "gpt_oss" \
            else None
        self.loaded: set[str] = set()

    def load(self, name: str, tensor: torch.Tensor) -> None:
        """Copy one tensor into its place (cast to the parameter's dtype and device)."""
        if name.endswith(_IGNORED_SUFFIXES) or (self.tied and name == "lm_head.weight") or self._is_mtp(name):
            return
        if self.fused_checkpoint and name.endswith(_FUSED_SUFFIXES):
            for part_name, part in _split_fused(name, tensor, self.config):
                self.load(part_name, part)
            return
        if self.gpt_oss is not None:
            parts = self.gpt_oss.parts(name, tensor)
            if parts is not None:
                for part_name, part in parts:
                    self.load(part_name, part)
                return
        elif self.moe is not None:
            parts = checkpoint_layout(name, tensor, self.config, self.moe)
            if parts is not None:
                for part_name, part in parts:
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

    def _is_mtp(self, name: str) -> bool:
        """Whether ``name`` belongs to a multi-token-prediction layer the checkpoint appends after the decoder's
        (DeepSeek-V3's and GLM-4.5's ``model.layers.{num_hidden_layers + i}``), which serving does not run."""
        if not getattr(self.config, "num_nextn_predict_layers", 0) or not name.startswith("model.layers."):
            return False
        index = name.split(".", 3)[2]
        return index.isdigit() and int(index) >= self.config.num_hidden_layers

    def finish(self) -> None:
        """Raise ValueError naming the tensors that never arrived."""
        unpaired = self.gpt_oss.unpaired() if self.gpt_oss else []  # what the missing experts' weights wait on
        missing = unpaired + sorted(set(self.targets) - self.loaded)
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


def _model_targets(model: LlamaModelForCausalLM) -> dict[str, Targets]:
    tp = model.tp
    vocab, offset = model.config.vocab_size, model.vocab_offset
    targets: dict[str, Targets] = {
        "model.embed_tokens.weight": part_target(tp, model.embed_weight.data, 0, offset, vocab),
        f"{model.variant.names.final_norm}.weight": whole_target(model.norm_weight, model.variant.norm_weight_offset),
    }
    if model.norm_bias is not None:
        targets[f"{model.variant.names.final_norm}.bias"] = whole_target(model.norm_bias)
    if not model.tie_word_embeddings:
        targets["lm_head.weight"] = part_target(tp, model.lm_head_weight.data, 0, offset, vocab)
    if model.lm_head_bias is not None:
        targets["lm_head.bias"] = part_target(tp, model.lm_head_bias.data, 0, offset, vocab)
    for index, layer in enumerate(model.layers):
        targets.update(_layer_targets(f"model.layers.{index}.", cast(LlamaDecoderLayer, layer), model, tp))
    return targets


def _layer_targets(
    prefix: str, layer: LlamaDecoderLayer, model: LlamaModelForCausalLM, tp: TensorParallel
) -> dict[str, Targets]:
    config, names = model.config, model.variant.names
    mlp = layer.mlp
    if isinstance(layer.attn, MlaAttention):
        targets = mla_targets(prefix, layer.attn, config, names.o_proj)
    else:
        targets = _attention_targets(prefix, layer.attn, model, tp)
    if isinstance(mlp, SparseMoeBlock):
        targets.update(moe_targets(prefix, mlp, model))
    else:
        targets.update(mlp_targets(prefix, mlp, tp, (names.mlp_gate, names.mlp_up, names.mlp_down)))
    targets.update(_norm_targets(prefix, layer, model.variant.norm_weight_offset, names.sandwich_norms,
                                 names.input_norms))
    return targets


def _attention_targets(prefix: str, attn: LlamaAttention, model: LlamaModelForCausalLM, tp: TensorParallel
                       ) -> dict[str, Targets]:
    """q/k/v (fused here, with their biases), the output projection and the q/k norms."""
    config, names = model.config, model.variant.names
    hd = attn.head_dim
    q_rows, kv_rows = attn.num_heads * hd, attn.num_kv_heads * hd
    all_q_rows, all_kv_rows = config.num_attention_heads * hd, config.num_key_value_heads * hd
    q_offset, kv_offset = attn.head_offset * hd, attn.kv_head_offset * hd
    qkv_parts = {  # rows of the fused parameter, and where this rank's rows sit in the checkpoint tensor
        "q_proj": (0, q_rows, q_offset, all_q_rows),
        "k_proj": (q_rows, q_rows + kv_rows, kv_offset, all_kv_rows),
        "v_proj": (q_rows + kv_rows, q_rows + 2 * kv_rows, kv_offset, all_kv_rows),
    }
    targets: dict[str, Targets] = {
        f"{prefix}{names.o_proj}.weight": part_target(tp, attn.o_weight.data, 1, q_offset, all_q_rows),
    }
    for part, (start, end, offset, full) in qkv_parts.items():
        targets[f"{prefix}self_attn.{part}.weight"] = part_target(tp, attn.qkv_weight.data[start:end], 0, offset, full)
        if attn.qkv_bias is not None:
            targets[f"{prefix}self_attn.{part}.bias"] = part_target(tp, attn.qkv_bias.data[start:end], 0, offset, full)
    if attn.o_bias is not None:
        targets[f"{prefix}{names.o_proj}.bias"] = whole_target(attn.o_bias)
    if attn.sinks is not None:
        targets[f"{prefix}self_attn.sinks"] = part_target(tp, attn.sinks.data, 0, attn.head_offset,
                                                          config.num_attention_heads)
    targets.update(_qk_norm_targets(prefix, attn, config, model.variant.norm_weight_offset, names.qk_norms))
    return targets


def _qk_norm_targets(prefix: str, attn: LlamaAttention, config: PretrainedConfig, norm_offset: float,
                     names: tuple[str, str]) -> dict[str, Targets]:
    """The q and k norms' weights (one row per head in the model): OLMo's [heads * head_dim] over all heads and
    Cohere's [heads, head_dim] sliced to this rank's heads, else the [head_dim] row every head shares."""
    weight = attn.qk_norm_weight
    if weight is None:
        return {}
    q_rows, k_rows = weight.data[: attn.num_heads], weight.data[attn.num_heads :]
    q_name, k_name = (f"{prefix}{name}.weight" for name in names)
    tp, hd = attn.tp, attn.head_dim
    if attn.qk_norm == "full_width":
        return {q_name: part_target(tp, q_rows.view(-1), 0, attn.head_offset * hd, config.num_attention_heads * hd),
                k_name: part_target(tp, k_rows.view(-1), 0, attn.kv_head_offset * hd,
                                    config.num_key_value_heads * hd)}
    if attn.qk_norm == "head_layer_norm":
        return {q_name: part_target(tp, q_rows, 0, attn.head_offset, config.num_attention_heads),
                k_name: part_target(tp, k_rows, 0, attn.kv_head_offset, config.num_key_value_heads)}
    return {q_name: Target(q_rows, (hd,), offset=norm_offset), k_name: Target(k_rows, (hd,), offset=norm_offset)}


def _norm_targets(prefix: str, layer: LlamaDecoderLayer, offset: float, sandwich_names: tuple[str, str, str],
                  input_names: tuple[str, str] = ("input_layernorm", "post_attention_layernorm")) -> dict[str, Targets]:
    """The layer's norms: the attention's input norm (``input_names[0]``; none with OLMo 2's output-only norms) and
    the MLP's (``input_names[1]``; none with a parallel residual), with their biases (LayerNorms: Phi-2, StarCoder2);
    with sandwich norms, ``sandwich_names`` name the attention output's, the MLP input's and the MLP output's (Gemma
    2 and 3: post_attention_layernorm, pre_feedforward_layernorm, post_feedforward_layernorm)."""
    attention_out, mlp_out = layer.attention_out_norm_weight, layer.mlp_out_norm_weight
    sandwich = attention_out is not None and mlp_out is not None
    mlp_input_name = sandwich_names[1] if sandwich else input_names[1]
    norms = {input_names[0]: (layer.input_norm_weight, layer.input_norm_bias),
             mlp_input_name: (layer.post_attention_norm_weight, layer.post_attention_norm_bias)}
    if sandwich:
        norms[sandwich_names[0]] = (attention_out, None)
        norms[sandwich_names[2]] = (mlp_out, None)
    targets: dict[str, Targets] = {}
    for name, (weight, bias) in norms.items():
        if weight is not None:
            targets[f"{prefix}{name}.weight"] = whole_target(weight, offset)
        if bias is not None:
            targets[f"{prefix}{name}.bias"] = whole_target(bias)
    return targets
