"""What each supported HF architecture changes in the shared Llama-family decoder.

Llama, Mistral, Qwen2/3, Phi-3, Gemma, Gemma 2, Gemma 3 (text), Granite, OLMo 2/3 and the MoE models Mixtral,
Qwen2-MoE, Qwen3-MoE, Granite MoE, OLMoE, GLM-4.5, dots.llm1, DeepSeek-V2/V3 (latent attention) and Llama 4 are one
decoder (attention then a gated MLP or routed experts, RoPE, RMSNorm) that differ in constants and a few switches;
ModelVariant holds them, read once from the HF config."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from executor_svc.models.llama4_settings import (
    LLAMA4_TYPES,
    QueryTemperature,
    layer_chunks,
    query_temperature,
)
from executor_svc.models.mla_settings import MlaSettings, mla_settings_for
from executor_svc.models.moe_settings import MoeSettings, moe_settings_for
from executor_svc.models.rope import is_per_layer_type, rope_parameters

if TYPE_CHECKING:
    import torch
    from transformers import PretrainedConfig

_FUSED_CHECKPOINT_TYPES = ("phi3",)
"""model_types whose checkpoints store q/k/v as one ``qkv_proj`` and gate/up as one ``gate_up_proj`` (GLM: the
latter only)."""
_POST_NORM_TYPES = ("olmo2", "olmo3", "exaone4", "flex_olmo")
"""model_types that norm each branch's output and not its input."""
_OLMO_TYPES = ("olmo2", "olmo3", "olmoe", "flex_olmo", "minimax_m2")
"""model_types whose q and k norms span all heads."""
_GLM_TYPES = ("glm", "glm4")
"""model_types with interleaved RoPE pairs, a fused gate_up_proj in the checkpoint and no o_proj bias."""
_ERNIE_TYPES = ("ernie4_5", "ernie4_5_moe")
"""model_types whose use_bias biases every projection and whose RoPE turns interleaved pairs."""
_COHERE_TYPES = ("cohere", "cohere2")
"""model_types with LayerNorm, parallel attention and MLP branches and interleaved RoPE."""
_NO_O_BIAS_TYPES = (*_GLM_TYPES, "glm4_moe")
"""model_types whose attention_bias biases q, k and v but not o_proj."""
_GEMMA_TYPES = ("gemma", "gemma2", "gemma3_text")
"""model_types whose RMSNorms scale by 1 + w and whose embeddings are scaled by sqrt(hidden_size)."""
_HUNYUAN_TYPES = ("hunyuan_v1_dense", "hunyuan_v1_moe")
"""model_types that norm each head's q and k (query_layernorm, key_layernorm) after RoPE."""


@dataclass(frozen=True)
class CheckpointNames:
    """A checkpoint's names for the tensors families name differently (Llama's unless a family calls them
    otherwise): the output projection, the MLP's projections (``mlp_gate`` None: an MLP without a gate), the final
    norm, and with sandwich norms those of the attention output's, the MLP input's and the MLP output's norms."""

    o_proj: str = "self_attn.o_proj"
    mlp_gate: str | None = "mlp.gate_proj"
    mlp_up: str = "mlp.up_proj"
    mlp_down: str = "mlp.down_proj"
    final_norm: str = "model.norm"
    sandwich_norms: tuple[str, str, str] = ("post_attention_layernorm", "pre_feedforward_layernorm",
                                            "post_feedforward_layernorm")
    qk_norms: tuple[str, str] = ("self_attn.q_norm", "self_attn.k_norm")
    input_norms: tuple[str, str] = ("input_layernorm", "post_attention_layernorm")
    """The attention's and the MLP's input norms (without sandwich norms)."""


_CHECKPOINT_NAMES = {
    "phi": CheckpointNames("self_attn.dense", None, "mlp.fc1", "mlp.fc2", "model.final_layernorm"),
    "starcoder2": CheckpointNames(mlp_gate=None, mlp_up="mlp.c_fc", mlp_down="mlp.c_proj"),
    "nemotron": CheckpointNames(mlp_gate=None),
    "arcee": CheckpointNames(mlp_gate=None),
    "glm4": CheckpointNames(sandwich_norms=("post_self_attn_layernorm", "post_attention_layernorm",
                                            "post_mlp_layernorm")),
    **{model_type: CheckpointNames(qk_norms=("self_attn.query_layernorm", "self_attn.key_layernorm"))
       for model_type in _HUNYUAN_TYPES},
    "llama4_text": CheckpointNames(mlp_gate="feed_forward.gate_proj", mlp_up="feed_forward.up_proj",
                                   mlp_down="feed_forward.down_proj"),
    "apertus": CheckpointNames(mlp_gate=None, input_norms=("attention_layernorm", "feedforward_layernorm")),
}
"""model_types naming tensors otherwise than Llama: MLPs without a gate (act(up), relu^2 for Nemotron and Arcee, xIELU
for Apertus), Phi-2's output projection and final norm, GLM-4's sandwich norms, Hunyuan's q/k norms, Llama 4's
feed_forward, Apertus's input norms."""
_BIASED_NORM_TYPES = ("phi", "starcoder2", "nemotron")
"""model_types whose norms are LayerNorms with biases (Nemotron's scale by 1 + w)."""


@dataclass(frozen=True)
class ModelVariant:
    """The per-architecture constants and switches of the decoder (see variant_for)."""

    hidden_act: str
    """transformers' name of the MLP gate's activation (``silu``, ``gelu_pytorch_tanh``, ...)."""
    qkv_bias: bool
    o_bias: bool
    qk_norm: str | None
    """How q and k are normed before RoPE: ``head`` (RMSNorm of each head, one weight row: Qwen3, Gemma 3),
    ``head_layer_norm`` (LayerNorm of each head, a weight row per head: Cohere's use_qk_norm), ``full_width`` (RMSNorm
    over all heads at once: OLMo), ``l2`` (RMSNorm of each head without a weight, on RoPE layers only: Llama 4), None
    (not normed)."""
    sandwich_norms: bool
    """RMSNorm of the attention and MLP outputs too, before they join the residual stream (Gemma 2 and 3, OLMo 2)."""
    pre_norms: bool
    """RMSNorm of the attention's and the MLP's inputs (every family but OLMo 2 and 3, which norm outputs only)."""
    norm_weight_offset: float
    """Added to every RMSNorm weight at load: Gemma stores w and scales by (1 + w)."""
    embedding_scale: float
    """Multiplies the token embeddings (Gemma: sqrt(hidden_size); Granite: embedding_multiplier)."""
    residual_scale: float
    """Multiplies each attention and MLP output before it joins the residual stream (Granite)."""
    attention_scale: float
    """The softmax scale of q.k (head_dim ** -0.5 unless the config sets its own)."""
    attention_softcap: float | None
    """Attention scores become tanh(s / c) * c before the softmax (Gemma 2's attn_logit_softcapping)."""
    logits_divisor: float
    """The LM head's logits are divided by it (Granite's logits_scaling)."""
    logits_softcap: float | None
    """Logits become tanh(logits / c) * c (final_logit_softcapping; None: as they are)."""
    rotary_dim: int
    """Leading dimensions of each head that RoPE rotates (head_dim unless partial_rotary_factor < 1)."""
    layer_windows: tuple[int | None, ...]
    """Each layer's sliding attention window (None: the whole context)."""
    local_rope_layers: tuple[bool, ...]
    """Layers that rotate by the ``sliding_attention`` RoPE settings (Gemma 3's local layers: another theta)."""
    rope_layers: tuple[bool, ...]
    """Per layer, whether q and k are rotated at all (SmolLM3's ``no_rope_layers``: 0 marks a layer without
    positions; Cohere 2's global layers)."""
    fused_checkpoint: bool
    """The checkpoint stores fused tensors, split at load: Phi-3's ``qkv_proj`` and ``gate_up_proj``, GLM's
    ``gate_up_proj``."""
    moe: MoeSettings | None = None
    """The routed experts of a mixture-of-experts model (None: every MLP dense)."""
    rotary_interleaved: bool = False
    """RoPE turns interleaved pairs (2i, 2i + 1) rather than halves (GLM)."""
    layer_norm: bool = False
    """LayerNorm (mean removed, no bias) in place of RMSNorm everywhere (Cohere)."""
    parallel_residual: bool = False
    """Attention and MLP read the same normed input and both join the residual stream at once (Cohere)."""
    mlp_bias: bool = False
    """The MLP's projections add biases (Phi-2, StarCoder2, Llama's mlp_bias)."""
    norm_bias: bool = False
    """The LayerNorms add biases (Phi-2, StarCoder2)."""
    lm_head_bias: bool = False
    """The LM head adds a bias (Phi-2)."""
    names: CheckpointNames = field(default_factory=lambda: CheckpointNames())
    """The checkpoint's names of the tensors other families name differently."""
    attention_sinks: bool = False
    """Each head has a learned sink logit in its softmax (GPT-OSS)."""
    qk_norm_after_rope: bool = False
    """q and k are normed after they are rotated rather than before (Hunyuan)."""
    mla: MlaSettings | None = None
    """Multi-head latent attention in place of q/k/v heads (DeepSeek-V2/V3: models/mla.py); None: ordinary."""
    layer_chunks: tuple[int | None, ...] = ()
    """Each layer's attention chunk (Llama 4's chunked_attention layers; None or no entries: the whole context)."""
    query_temperature: QueryTemperature | None = None
    """Llama 4's position-dependent query scale of its NoPE layers (None: none)."""

    @property
    def triton_lacks(self) -> str | None:
        """What this model's attention needs that the Triton kernels lack (None: nothing)."""
        return "attention sinks" if self.attention_sinks else None

    @property
    def mlp_gated(self) -> bool:
        """act(gate) * up; False: act(up) alone (Phi-2's fc1/fc2, StarCoder2's c_fc/c_proj, relu^2 MLPs)."""
        return self.names.mlp_gate is not None

    def activation(self) -> Callable[[torch.Tensor], torch.Tensor]:
        """transformers' own implementation of hidden_act, so the MLP computes exactly what HF's does (its
        module's forward: no module-call overhead per layer; activations hold no weights)."""
        from transformers.activations import ACT2FN

        return ACT2FN[self.hidden_act].forward


def head_dim_of(config: PretrainedConfig) -> int:
    """The attention head size (config.head_dim where set: Gemma, Qwen3, Mistral-Nemo)."""
    return getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads


def variant_for(config: PretrainedConfig) -> ModelVariant:
    """The ModelVariant of an HF config; raises ValueError naming a config field this decoder cannot serve."""
    _check_supported(config)
    model_type = getattr(config, "model_type", None)
    head_dim = head_dim_of(config)
    attention_bias = bool(getattr(config, "attention_bias", False))
    rotary_factor = float(rope_parameters(config).get("partial_rotary_factor", 1.0))
    softcap = getattr(config, "final_logit_softcapping", None)
    mla = mla_settings_for(config)
    # Phi-2 biases every projection; StarCoder2 as its use_bias says.
    classic_bias = model_type == "phi" or (model_type in ("starcoder2", *_ERNIE_TYPES)
                                           and bool(getattr(config, "use_bias", True)))
    return ModelVariant(
        hidden_act=hidden_act_of(config),
        qkv_bias=attention_bias or _qwen2_qkv_bias(config, model_type) or classic_bias,
        o_bias=_o_bias(config, model_type, attention_bias) or classic_bias,
        qk_norm=_qk_norm(config, model_type),
        sandwich_norms=model_type in ("gemma2", "gemma3_text", "glm4", *_POST_NORM_TYPES),
        pre_norms=model_type not in _POST_NORM_TYPES,
        norm_weight_offset=1.0 if model_type in (*_GEMMA_TYPES, "nemotron") else 0.0,
        embedding_scale=_embedding_scale(config, model_type),
        residual_scale=float(getattr(config, "residual_multiplier", 1.0)),
        attention_scale=_attention_scale(config, head_dim),
        attention_softcap=_optional_float(getattr(config, "attn_logit_softcapping", None)),
        logits_divisor=_logits_divisor(config),
        logits_softcap=_optional_float(softcap),
        rotary_dim=mla.qk_rope_head_dim if mla else int(head_dim * rotary_factor),
        layer_windows=layer_windows(config),
        local_rope_layers=_local_rope_layers(config),
        fused_checkpoint=has_fused_checkpoint(config),
        moe=moe_settings_for(config),
        rotary_interleaved=(model_type in (*_GLM_TYPES, *_COHERE_TYPES, *_ERNIE_TYPES, *LLAMA4_TYPES)
                            or bool(mla and mla.rope_interleaved)),
        layer_norm=model_type in (*_COHERE_TYPES, *_BIASED_NORM_TYPES),
        parallel_residual=model_type in (*_COHERE_TYPES, "phi"),
        mlp_bias=classic_bias or bool(getattr(config, "mlp_bias", False)),
        norm_bias=model_type in _BIASED_NORM_TYPES,
        lm_head_bias=model_type == "phi" or (model_type == "ernie4_5_moe" and bool(getattr(config, "use_bias", False))),
        names=_CHECKPOINT_NAMES.get(model_type or "", CheckpointNames()),
        rope_layers=_rope_layers(config),
        qk_norm_after_rope=model_type in (*_HUNYUAN_TYPES, *LLAMA4_TYPES),
        attention_sinks=model_type == "gpt_oss",
        mla=mla,
        layer_chunks=layer_chunks(config),
        query_temperature=query_temperature(config),
    )


def _qk_norm(config: PretrainedConfig, model_type: str | None) -> str | None:
    """ModelVariant.qk_norm of a config (Cohere's use_qk_norm: Command R+)."""
    if model_type in _OLMO_TYPES:
        return "full_width"
    if model_type in ("qwen3", "qwen3_moe", "gemma3_text", "exaone4", "dots1", "apertus", *_HUNYUAN_TYPES):
        return "head"
    if model_type == "glm4_moe" and bool(getattr(config, "use_qk_norm", False)):
        return "head"
    if model_type == "cohere" and bool(getattr(config, "use_qk_norm", False)):
        return "head_layer_norm"
    if model_type in LLAMA4_TYPES and bool(getattr(config, "use_qk_norm", False)):
        return "l2"
    return None


def _o_bias(config: PretrainedConfig, model_type: str | None, attention_bias: bool) -> bool:
    """Whether o_proj adds a bias: as attention_bias says, but never for GLM's, and as attention_out_bias says
    for Seed-OSS (whose attention_bias biases q, k and v only)."""
    if model_type == "seed_oss":
        return bool(getattr(config, "attention_out_bias", False))
    return attention_bias and model_type not in _NO_O_BIAS_TYPES


def _logits_divisor(config: PretrainedConfig) -> float:
    """What the logits are divided by: Granite's logits_scaling, or 1 / Cohere's logit_scale (a multiplier)."""
    if getattr(config, "model_type", None) in _COHERE_TYPES:
        return 1.0 / float(config.logit_scale)
    return float(getattr(config, "logits_scaling", 1.0))


def norm_eps_of(config: PretrainedConfig) -> float:
    """The norms' epsilon (rms_norm_eps; Cohere's and Phi-2's LayerNorm call it layer_norm_eps, StarCoder2's
    norm_epsilon, Nemotron's norm_eps)."""
    for name in ("rms_norm_eps", "layer_norm_eps", "norm_epsilon", "norm_eps"):  # StarCoder2, Nemotron
        eps = getattr(config, name, None)
        if eps is not None:
            return float(eps)
    raise ValueError("rms_norm_eps: the config names no norm epsilon")


def _rope_layers(config: PretrainedConfig) -> tuple[bool, ...]:
    """SmolLM3's ``no_rope_layers`` (1: the layer uses RoPE, 0: it does not); Cohere 2 and EXAONE 4 (with a window)
    rotate their sliding layers only; else every layer rotates."""
    model_type = getattr(config, "model_type", None)
    if model_type == "cohere2" or (model_type == "exaone4" and getattr(config, "sliding_window", None)):
        return tuple(kind == "sliding_attention" for kind in config.layer_types)
    flags = getattr(config, "no_rope_layers", None)
    if flags is None:
        return (True,) * config.num_hidden_layers
    if len(flags) != config.num_hidden_layers:
        raise ValueError(f"no_rope_layers: needs one entry per layer ({config.num_hidden_layers}), got {len(flags)}")
    return tuple(bool(flag) for flag in flags)


def _qwen2_qkv_bias(config: PretrainedConfig, model_type: str | None) -> bool:
    """Qwen2 always biases q/k/v (its config has no such field); Qwen2-MoE unless its qkv_bias says otherwise."""
    if model_type == "qwen2":
        return True
    return model_type == "qwen2_moe" and bool(getattr(config, "qkv_bias", True))


def has_fused_checkpoint(config: PretrainedConfig) -> bool:
    """Whether the checkpoint stores q/k/v as one ``qkv_proj`` (Phi-3) or gate/up as one ``gate_up_proj`` (Phi-3,
    GLM)."""
    return getattr(config, "model_type", None) in (*_FUSED_CHECKPOINT_TYPES, *_GLM_TYPES)


def has_fused_qkv(config: PretrainedConfig) -> bool:
    """Whether the checkpoint stores q/k/v as one ``qkv_proj`` (Phi-3; GLM keeps them apart)."""
    return getattr(config, "model_type", None) in _FUSED_CHECKPOINT_TYPES


def _optional_float(value: float | None) -> float | None:
    return None if value is None else float(value)


def hidden_act_of(config: PretrainedConfig) -> str:
    """The MLP activation's name (Gemma 3 calls the field hidden_activation)."""
    return getattr(config, "hidden_activation", None) or getattr(config, "hidden_act", None) or "silu"


def _attention_scale(config: PretrainedConfig, head_dim: int) -> float:
    if getattr(config, "attention_multiplier", None):  # Granite
        return float(config.attention_multiplier)
    if getattr(config, "query_pre_attn_scalar", None):  # Gemma 2 and 3
        return float(config.query_pre_attn_scalar) ** -0.5
    return float(head_dim**-0.5)


def _local_rope_layers(config: PretrainedConfig) -> tuple[bool, ...]:
    """Per layer, whether it uses separate ``sliding_attention`` RoPE settings (rope_parameters keyed by layer
    type, as Gemma 3's are)."""
    if not is_per_layer_type(config):
        return (False,) * config.num_hidden_layers
    return tuple(kind == "sliding_attention" for kind in config.layer_types)


def _embedding_scale(config: PretrainedConfig, model_type: str | None) -> float:
    if model_type in _GEMMA_TYPES:
        return float(config.hidden_size**0.5)
    return float(getattr(config, "embedding_multiplier", 1.0))


def layer_windows(config: PretrainedConfig) -> tuple[int | None, ...]:
    """Each layer's sliding window as HF applies it: from ``layer_types`` where the config has them (Qwen2/3:
    only ``sliding_attention`` layers slide), else config.sliding_window for every layer (Mistral, Phi-3)."""
    window = getattr(config, "sliding_window", None)
    layer_types = getattr(config, "layer_types", None)
    # A config with use_sliding_window off slides nowhere, whatever its layer_types say (SmolLM3 reads it so; Qwen2's
    # configs clear sliding_window themselves).
    if getattr(config, "use_sliding_window", None) is False:
        return (None,) * config.num_hidden_layers
    if layer_types:
        return tuple(window if kind == "sliding_attention" else None for kind in layer_types)
    return (window,) * config.num_hidden_layers


def _check_supported(config: PretrainedConfig) -> None:
    """Reject config features this decoder does not implement, naming the field."""
    from transformers.activations import ACT2FN

    hidden_act = hidden_act_of(config)
    if hidden_act not in ACT2FN:
        raise ValueError(f"hidden_act: {hidden_act!r} is not an activation transformers knows")
    if getattr(config, "use_bidirectional_attention", False):
        raise ValueError("use_bidirectional_attention: only causal attention is served")
    if getattr(config, "qk_layernorm", False):
        raise ValueError("qk_layernorm: Phi's LayerNorms of q and k are not supported")
    if getattr(config, "clip_qkv", None) is not None:
        raise ValueError("clip_qkv: clamped q/k/v projections are not supported")
    layer_types = getattr(config, "layer_types", None) or []
    unknown = sorted(set(layer_types) - {"full_attention", "sliding_attention", "chunked_attention"})
    if unknown:
        raise ValueError(f"layer_types: {unknown} not supported (full_attention, sliding_attention and "
                         "chunked_attention only)")
    window = getattr(config, "sliding_window", None)
    # Qwen2-MoE keeps sliding_window 0 when no layer slides.
    if any(w is not None for w in layer_windows(config)) and (not isinstance(window, int) or window < 1):
        raise ValueError(f"sliding_window: must be a positive integer or null, got {window!r}")
