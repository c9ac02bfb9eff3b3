"""What a Llama 4 config (``llama4_text``) changes in the shared decoder, beyond the switches other families share:
chunked attention on its RoPE layers, the attention temperature of its NoPE layers, and its experts. Ministral 3
(``ministral3``) and Mistral 4 (``mistral4``) borrow the temperature for every layer.

- Layers whose ``layer_types`` entry is ``chunked_attention`` (the RoPE layers when ``attention_chunk_size`` is set)
  attend within ``attention_chunk_size``-aligned spans of positions; the others (every ``no_rope_layer_interval``-th,
  NoPE) attend to the whole context.
- With ``attn_temperature_tuning``, a NoPE layer's queries at position p are scaled by
  ``log1p(floor((p + 1) / floor_scale)) * attn_scale + 1`` (1 for the first ``floor_scale - 1`` positions).
- Ministral 3 and Mistral 4 scale every layer's queries by ``log1p(floor(p / original_max_position_embeddings)) *
  llama_4_scaling_beta + 1`` (its RoPE settings hold both).
- The RoPE layers L2-norm q and k after rotating them (``use_qk_norm``; an RMS norm without a weight).
- Experts: each token's top ``num_experts_per_tok`` router logits choose its experts, each weighted by its logit's
  sigmoid; the weight scales the expert's input, not its output. An always-on shared expert as wide as one expert.
  ``moe_layers`` (else every ``interleave_moe_layer_step``-th layer) route; the others are dense MLPs of
  ``intermediate_size_mlp``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from transformers import PretrainedConfig

LLAMA4_TYPES = ("llama4_text",)


@dataclass(frozen=True)
class QueryTemperature:
    """Llama 4's attention temperature tuning: queries at position p scaled by
    log1p(floor((p + position_offset) / floor_scale)) * attn_scale + 1, on the NoPE layers (Llama 4) or on every
    layer (Ministral 3)."""

    floor_scale: float
    attn_scale: float
    position_offset: float = 1.0
    every_layer: bool = False

    def __post_init__(self) -> None:
        if not self.floor_scale > 0:
            raise ValueError(f"floor_scale: must be > 0, got {self.floor_scale}")


def is_llama4(config: PretrainedConfig) -> bool:
    """Whether ``config`` is a Llama 4 decoder's."""
    return getattr(config, "model_type", None) in LLAMA4_TYPES


def layer_chunks(config: PretrainedConfig) -> tuple[int | None, ...]:
    """Each layer's attention chunk (``attention_chunk_size`` for its ``chunked_attention`` layers; None: the whole
    context)."""
    layer_types = getattr(config, "layer_types", None) or []
    if "chunked_attention" not in layer_types:
        return (None,) * config.num_hidden_layers
    chunk = getattr(config, "attention_chunk_size", None)
    if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
        raise ValueError(f"attention_chunk_size: must be an integer >= 1 with chunked_attention layers, got {chunk!r}")
    return tuple(chunk if kind == "chunked_attention" else None for kind in layer_types)


def query_temperature(config: PretrainedConfig) -> QueryTemperature | None:
    """The attention temperature tuning of a Llama 4 config's NoPE layers or of every Ministral 3 layer (None: off,
    or neither)."""
    if getattr(config, "model_type", None) in ("ministral3", "mistral4"):
        return _ministral3_temperature(config)
    if not is_llama4(config) or not getattr(config, "attn_temperature_tuning", False):
        return None
    return QueryTemperature(float(config.floor_scale), float(config.attn_scale))


def _ministral3_temperature(config: PretrainedConfig) -> QueryTemperature | None:
    from executor_svc.models.rope import rope_parameters

    params = rope_parameters(config)
    beta = params.get("llama_4_scaling_beta")
    if not beta:
        return None
    original = params.get("original_max_position_embeddings")
    if isinstance(original, bool) or not isinstance(original, int) or original < 1:
        raise ValueError("rope_parameters.original_max_position_embeddings: must be an integer >= 1 with "
                         f"llama_4_scaling_beta, got {original!r}")
    return QueryTemperature(float(original), float(beta), position_offset=0.0, every_layer=True)


def moe_layer_flags(config: PretrainedConfig) -> tuple[bool, ...]:
    """Per layer, whether it routes (``moe_layers``, which the config derives from ``interleave_moe_layer_step``)."""
    layers = list(getattr(config, "moe_layers", None) or [])
    bad = [index for index in layers if not isinstance(index, int) or not 0 <= index < config.num_hidden_layers]
    if bad:
        raise ValueError(f"moe_layers: indices must lie in [0, {config.num_hidden_layers}), got {bad}")
    return tuple(index in layers for index in range(config.num_hidden_layers))
