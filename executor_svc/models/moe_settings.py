"""What a mixture-of-experts checkpoint's config says about its sparse MLPs (Mixtral, Qwen2-MoE, Qwen3-MoE, Granite
MoE, OLMoE)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from transformers import PretrainedConfig

_MOE_TYPES = ("mixtral", "qwen2_moe", "qwen3_moe", "granitemoe", "granitemoeshared", "olmoe")
"""model_types whose MLPs are routed experts."""


@dataclass(frozen=True)
class MoeSettings:
    """The routed-experts MLP of a MoE decoder: each token runs ``top_k`` of ``num_experts`` gated MLPs and sums
    their outputs weighted by the router's softmax probabilities."""

    num_experts: int
    top_k: int
    expert_intermediate_size: int
    """The hidden size of each expert's gated MLP."""
    normalize_top_k: bool
    """The top-k probabilities are divided by their sum (Mixtral always; Qwen's norm_topk_prob)."""
    float32_routing_weights: bool
    """The expert outputs are weighted in float32 and cast back (Mixtral) rather than by weights cast to the
    activations' dtype first (Qwen); the same in float32, slightly different in bf16."""
    shared_expert_intermediate_size: int | None
    """The always-on shared expert's width (Qwen2-MoE, Granite MoE shared; None: none)."""
    sparse_layers: tuple[bool, ...]
    """Per layer, whether its MLP is the routed experts (else a dense MLP of config.intermediate_size)."""
    intermediate_size_field: str = "moe_intermediate_size"
    """The config field expert_intermediate_size comes from (named in errors)."""
    shared_expert_gated: bool = True
    """The shared expert's output is scaled by sigmoid(x . shared_expert_gate) (Qwen2-MoE) rather than added as it
    is (Granite MoE shared)."""

    def __post_init__(self) -> None:
        if self.num_experts < 1:
            raise ValueError(f"num_experts: must be >= 1, got {self.num_experts}")
        if not 1 <= self.top_k <= self.num_experts:
            raise ValueError(f"num_experts_per_tok: must be in [1, {self.num_experts}], got {self.top_k}")
        if self.expert_intermediate_size < 1:
            raise ValueError(f"{self.intermediate_size_field}: must be >= 1, got {self.expert_intermediate_size}")


def is_moe(config: PretrainedConfig) -> bool:
    """Whether the checkpoint's MLPs are routed experts."""
    return getattr(config, "model_type", None) in _MOE_TYPES


def moe_settings_for(config: PretrainedConfig) -> MoeSettings | None:
    """The MoE settings of a config (None: a dense model); ValueError naming the config field that is out of range."""
    model_type = getattr(config, "model_type", None)
    if model_type == "mixtral":
        return _every_layer_sparse(config, "num_local_experts", normalize=True, float32_weights=True)
    if model_type in ("granitemoe", "granitemoeshared"):
        # Granite takes the softmax over the top-k logits: the top-k probabilities, normalised.
        shared = getattr(config, "shared_intermediate_size", 0) if model_type == "granitemoeshared" else 0
        return _every_layer_sparse(config, "num_local_experts", normalize=True, shared=shared, gated=False)
    if model_type == "olmoe":
        return _every_layer_sparse(config, "num_experts", normalize=bool(config.norm_topk_prob))
    if model_type in ("qwen2_moe", "qwen3_moe") and int(config.num_experts) > 0:  # 0 experts: all layers dense
        shared = getattr(config, "shared_expert_intermediate_size", None) if model_type == "qwen2_moe" else None
        return MoeSettings(
            num_experts=int(config.num_experts),
            top_k=int(config.num_experts_per_tok),
            expert_intermediate_size=int(config.moe_intermediate_size),
            normalize_top_k=bool(config.norm_topk_prob),
            float32_routing_weights=False,
            shared_expert_intermediate_size=int(shared) if shared else None,
            sparse_layers=_qwen_sparse_layers(config),
        )
    return None


def _every_layer_sparse(config: PretrainedConfig, experts_field: str, normalize: bool, float32_weights: bool = False,
                        shared: int | None = None, gated: bool = True) -> MoeSettings:
    """Settings of a model whose every layer routes, each expert config.intermediate_size wide."""
    return MoeSettings(
        num_experts=int(getattr(config, experts_field)),
        top_k=int(config.num_experts_per_tok),
        expert_intermediate_size=int(config.intermediate_size),
        normalize_top_k=normalize,
        float32_routing_weights=float32_weights,
        shared_expert_intermediate_size=int(shared) if shared else None,
        sparse_layers=(True,) * config.num_hidden_layers,
        intermediate_size_field="intermediate_size",
        shared_expert_gated=gated,
    )


def _qwen_sparse_layers(config: PretrainedConfig) -> tuple[bool, ...]:
    """Qwen's rule: a layer is sparse unless listed in mlp_only_layers, every decoder_sparse_step-th layer."""
    dense = set(getattr(config, "mlp_only_layers", None) or [])
    step = int(getattr(config, "decoder_sparse_step", 1) or 1)
    if step < 1:
        raise ValueError(f"decoder_sparse_step: must be >= 1, got {step}")
    return tuple(
        index not in dense and config.num_experts > 0 and (index + 1) % step == 0
        for index in range(config.num_hidden_layers)
    )
