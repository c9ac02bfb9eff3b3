"""What a mixture-of-experts checkpoint's config says about its sparse MLPs (Mixtral, Qwen2-MoE, Qwen3-MoE, Granite
MoE, OLMoE, GLM-4.5, dots.llm1, DeepSeek, ERNIE, GPT-OSS, Llama 4)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

from executor_svc.models.llama4_settings import LLAMA4_TYPES, moe_layer_flags

if TYPE_CHECKING:
    from transformers import PretrainedConfig

_SIGMOID_ROUTED_TYPES = ("glm4_moe", "dots1", "deepseek_v3", "glm4_moe_lite")
"""model_types routing as DeepSeek-V3 does (moe_routing.py): sigmoid scores, a correction bias, expert groups,
shared experts and dense first layers."""
_MOE_TYPES = ("mixtral", "qwen2_moe", "qwen3_moe", "granitemoe", "granitemoeshared", "olmoe", "flex_olmo",
              "deepseek_v2", "mistral4", "ernie4_5_moe", "gpt_oss", "hunyuan_v1_moe", "minimax_m2", *LLAMA4_TYPES,
              *_SIGMOID_ROUTED_TYPES)
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
    is (Granite MoE shared, the DeepSeek-style routers' shared experts)."""
    scoring: str = "softmax"
    """How the router scores experts: ``softmax`` over them all, ``sigmoid`` each (DeepSeek-V3 style), or
    ``sigmoid_of_top_logits`` (Llama 4: the top-k logits choose, each weighted by its sigmoid)."""
    score_correction_bias: bool = False
    """A learned per-expert bias is added to the scores for the choice only (e_score_correction_bias)."""
    num_groups: int = 1
    top_groups: int = 1
    """The experts form ``num_groups`` equal groups and each token chooses within its ``top_groups`` best (n_group,
    topk_group; as many as groups: no limit)."""
    groups_score_top_two: bool = False
    """A group scores its two best experts' sum (DeepSeek-V3-style routers, Mistral 4), else its best expert's
    (DeepSeek-V2)."""
    routed_scaling_factor: float = 1.0
    """Multiplies the routing weights (after any normalisation)."""
    float32_router: bool = False
    """The router's matmul runs in float32 from the activations cast up (HF keeps those routers in float32)."""
    router_bias: bool = False
    """The router adds a bias to its logits (GPT-OSS)."""
    expert_biases: bool = False
    """Each expert's gate/up and down projections add biases (GPT-OSS)."""
    clamped_swiglu: tuple[float, float] | None = None
    """GPT-OSS's expert activation (alpha, limit): (clamp(up) + 1) * g * sigmoid(alpha * g), g = gate clamped
    above at limit; None: act(gate) * up."""
    weights_scale_inputs: bool = False
    """Each routing weight scales its expert's input rather than its output (Llama 4)."""
    dense_intermediate_size: int | None = None
    """The width of the layers' dense MLPs where it is not config.intermediate_size (Llama 4's
    intermediate_size_mlp); None: config.intermediate_size."""

    def __post_init__(self) -> None:
        if self.num_experts < 1:
            raise ValueError(f"num_experts: must be >= 1, got {self.num_experts}")
        if not 1 <= self.top_k <= self.num_experts:
            raise ValueError(f"num_experts_per_tok: must be in [1, {self.num_experts}], got {self.top_k}")
        if self.expert_intermediate_size < 1:
            raise ValueError(f"{self.intermediate_size_field}: must be >= 1, got {self.expert_intermediate_size}")
        if self.scoring not in ("softmax", "sigmoid", "sigmoid_of_top_logits"):
            raise ValueError(f"scoring_func: {self.scoring!r} not supported (softmax or sigmoid)")
        self._check_groups()

    def _check_groups(self) -> None:
        if self.num_groups < 1 or self.num_experts % self.num_groups:
            raise ValueError(f"n_group: must divide the {self.num_experts} experts, got {self.num_groups}")
        if not 1 <= self.top_groups <= self.num_groups:
            raise ValueError(f"topk_group: must be in [1, {self.num_groups}], got {self.top_groups}")
        per_group = self.num_experts // self.num_groups
        if self.top_groups < self.num_groups and self.groups_score_top_two and per_group < 2:
            raise ValueError(f"n_group: groups score their two best experts, so need >= 2 each, got {per_group}")
        if self.top_groups * per_group < self.top_k:
            raise ValueError(f"topk_group: {self.top_groups} groups of {per_group} experts hold fewer than "
                             f"num_experts_per_tok ({self.top_k})")


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
    if model_type in ("olmoe", "flex_olmo"):
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
    if model_type == "glm4_moe_lite":
        return sigmoid_routed_settings(config, _mlp_layer_types(config))
    if model_type in _SIGMOID_ROUTED_TYPES:
        return sigmoid_routed_settings(config)
    if model_type == "deepseek_v2":
        return _deepseek_v2_settings(config)
    if model_type == "mistral4":
        return _mistral4_settings(config)
    if model_type == "ernie4_5_moe":
        return _ernie_settings(config)
    if model_type in LLAMA4_TYPES:
        return _llama4_settings(config)
    if model_type == "hunyuan_v1_moe":
        # Hunyuan-A13B: softmax over the float32 router's logits, the top-k normalised; every expert and the
        # ungated shared MLP intermediate_size wide
        settings = _every_layer_sparse(config, "num_experts", normalize=True, shared=int(config.intermediate_size),
                                       gated=False, top_k=_uniform_top_k(config.moe_topk))
        return dataclasses.replace(settings, float32_router=True)
    if model_type == "minimax_m2":
        # MiniMax-M2: each expert's sigmoid score chooses it (plus a correction bias) and, normalised, weighs it
        settings = _every_layer_sparse(config, "num_local_experts", normalize=True, float32_weights=True)
        return dataclasses.replace(settings, scoring="sigmoid", score_correction_bias=True)
    if model_type == "gpt_oss":
        return dataclasses.replace(
            _every_layer_sparse(config, "num_local_experts", normalize=True), router_bias=True, expert_biases=True,
            clamped_swiglu=(float(config.swiglu_alpha), float(config.swiglu_limit)))
    return None


def _llama4_settings(config: PretrainedConfig) -> MoeSettings:
    """Llama 4's experts (llama4_settings.py): top-k logits weighted by their sigmoids, which scale the experts'
    inputs; an ungated shared expert of intermediate_size; dense layers of intermediate_size_mlp."""
    _require_ints(config, ("num_local_experts", "num_experts_per_tok", "intermediate_size", "intermediate_size_mlp"))
    every_layer = _every_layer_sparse(config, "num_local_experts", normalize=False, shared=config.intermediate_size,
                                      gated=False)
    return dataclasses.replace(every_layer, sparse_layers=moe_layer_flags(config), scoring="sigmoid_of_top_logits",
                               weights_scale_inputs=True, dense_intermediate_size=int(config.intermediate_size_mlp))


def _ernie_settings(config: PretrainedConfig) -> MoeSettings:
    """ERNIE 4.5's router: the top-k of a float32 softmax chosen with a correction bias (moe_statics), weighed by
    the unbiased probabilities normalised; moe_num_shared_experts shared experts; every moe_layer_interval-th
    layer from moe_layer_start_index to moe_layer_end_index routes."""
    _require_ints(config, ("num_experts", "num_experts_per_tok", "moe_intermediate_size"))
    interval = int(config.moe_layer_interval)
    if interval < 1:
        raise ValueError(f"moe_layer_interval: must be >= 1, got {interval}")
    start, end = int(config.moe_layer_start_index), int(config.moe_layer_end_index)
    shared = int(config.moe_num_shared_experts or 0) * int(config.moe_intermediate_size)
    return MoeSettings(
        num_experts=int(config.num_experts),
        top_k=int(config.num_experts_per_tok),
        expert_intermediate_size=int(config.moe_intermediate_size),
        normalize_top_k=True,
        float32_routing_weights=False,
        shared_expert_intermediate_size=shared or None,
        sparse_layers=tuple((index + 1) % interval == 0 and start <= index <= end
                            for index in range(config.num_hidden_layers)),
        shared_expert_gated=False,
        score_correction_bias=True,
        float32_router=True,
    )


def _deepseek_v2_settings(config: PretrainedConfig) -> MoeSettings:
    """DeepSeek-V2's router: the top-k of a softmax, within the best topk_group of n_group groups (by their best
    expert) under topk_method group_limited_greedy, never normalised, scaled by routed_scaling_factor."""
    method = getattr(config, "topk_method", "greedy")
    if method not in ("greedy", "group_limited_greedy"):
        raise ValueError(f"topk_method: {method!r} not supported (greedy or group_limited_greedy)")
    limited = method == "group_limited_greedy"
    sigmoid = sigmoid_routed_settings(config)
    return dataclasses.replace(
        sigmoid, normalize_top_k=False, scoring="softmax", score_correction_bias=False, groups_score_top_two=False,
        num_groups=sigmoid.num_groups if limited else 1, top_groups=sigmoid.top_groups if limited else 1)


def _mistral4_settings(config: PretrainedConfig) -> MoeSettings:
    """Mistral 4's router: DeepSeek-V3's groups (scored by their two best experts), shared experts and dense first
    layers over a softmax without a correction bias; the top-k normalised as norm_topk_prob says, then scaled."""
    return dataclasses.replace(sigmoid_routed_settings(config), scoring="softmax", score_correction_bias=False,
                               float32_router=False)


def _require_ints(config: PretrainedConfig, names: tuple[str, ...]) -> None:
    """ValueError naming the first of ``names`` the config leaves unset or not an integer (HF's defaults are None)."""
    for name in names:
        if not isinstance(getattr(config, name, None), int):
            raise ValueError(f"{name}: must be an integer >= 1, got {getattr(config, name, None)!r}")


def _mlp_layer_types(config: PretrainedConfig) -> tuple[bool, ...]:
    """GLM-4.7-Flash's mlp_layer_types: ``sparse`` layers route, ``dense`` ones do not."""
    kinds = list(config.mlp_layer_types)
    if len(kinds) != config.num_hidden_layers or set(kinds) - {"dense", "sparse"}:
        raise ValueError(f"mlp_layer_types: needs one of dense or sparse per layer ({config.num_hidden_layers}), "
                         f"got {kinds}")
    return tuple(kind == "sparse" for kind in kinds)


def sigmoid_routed_settings(config: PretrainedConfig, sparse_layers: tuple[bool, ...] | None = None) -> MoeSettings:
    """DeepSeek-V3-style settings: sigmoid scores with a correction bias, expert groups, n_shared_experts ungated
    shared experts of moe_intermediate_size each, and dense MLPs in the first first_k_dense_replace layers (unless
    ``sparse_layers`` says otherwise)."""
    _require_ints(config, ("n_routed_experts", "num_experts_per_tok", "moe_intermediate_size"))
    shared = int(getattr(config, "n_shared_experts", 0) or 0) * int(config.moe_intermediate_size)
    first_dense = int(getattr(config, "first_k_dense_replace", 0) or 0)
    if sparse_layers is None:
        sparse_layers = tuple(index >= first_dense for index in range(config.num_hidden_layers))
    return MoeSettings(
        num_experts=int(config.n_routed_experts),
        top_k=int(config.num_experts_per_tok),
        expert_intermediate_size=int(config.moe_intermediate_size),
        normalize_top_k=bool(config.norm_topk_prob),
        float32_routing_weights=True,
        shared_expert_intermediate_size=shared or None,
        sparse_layers=sparse_layers,
        shared_expert_gated=False,
        scoring="sigmoid",
        score_correction_bias=True,
        num_groups=int(getattr(config, "n_group", 1) or 1),
        top_groups=int(getattr(config, "topk_group", 1) or 1),
        groups_score_top_two=True,
        routed_scaling_factor=float(getattr(config, "routed_scaling_factor", 1.0) or 1.0),
        float32_router=True,
    )


def _every_layer_sparse(config: PretrainedConfig, experts_field: str, normalize: bool, float32_weights: bool = False,
                        shared: int | None = None, gated: bool = True, top_k: int | None = None) -> MoeSettings:
    """Settings of a model whose every layer routes, each expert config.intermediate_size wide (``top_k``: when the
    config does not name it num_experts_per_tok)."""
    return MoeSettings(
        num_experts=int(getattr(config, experts_field)),
        top_k=int(config.num_experts_per_tok) if top_k is None else top_k,
        expert_intermediate_size=int(config.intermediate_size),
        normalize_top_k=normalize,
        float32_routing_weights=float32_weights,
        shared_expert_intermediate_size=int(shared) if shared else None,
        sparse_layers=(True,) * config.num_hidden_layers,
        intermediate_size_field="intermediate_size",
        shared_expert_gated=gated,
    )


def _uniform_top_k(value: int | list[int]) -> int:
    """Hunyuan's moe_topk: one number, or one per layer (served when every layer routes to as many)."""
    values = set(value) if isinstance(value, list) else {value}
    if len(values) != 1 or not all(isinstance(v, int) for v in values):
        raise ValueError(f"moe_topk: one top-k for every layer is served, got {value!r}")
    return int(values.pop())


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
