"""Tiny random-weight HF checkpoints (fp32, seeded) for fast tests of the executor."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

TINY_LLAMA_DEFAULTS: dict[str, Any] = {
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 128,
    "max_position_embeddings": 512,
    "rms_norm_eps": 1e-5,
    # Larger than HF's 0.02 so attention is peaked and logits differ by O(1): bugs cannot hide under atol.
    "initializer_range": 0.1,
    "tie_word_embeddings": False,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "pad_token_id": 0,
}


def make_tiny_llama(path: str | Path, seed: int = 0, vocab_size: int = 256, **overrides: Any) -> Path:
    """Write a random LlamaForCausalLM checkpoint (config.json + model.safetensors) into `path`."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(**{**TINY_LLAMA_DEFAULTS, "vocab_size": vocab_size, **overrides})
    return _save(LlamaForCausalLM, config, path, seed)


def make_tiny_qwen2(path: str | Path, seed: int = 0, vocab_size: int = 256, **overrides: Any) -> Path:
    """Write a random Qwen2ForCausalLM checkpoint (q/k/v biases) into `path`."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(**{**TINY_LLAMA_DEFAULTS, "vocab_size": vocab_size, **overrides})
    return _save(Qwen2ForCausalLM, config, path, seed)


def make_tiny_qwen3(path: str | Path, seed: int = 0, vocab_size: int = 256, **overrides: Any) -> Path:
    """Write a random Qwen3ForCausalLM checkpoint (per-head q/k RMSNorm) into `path`."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    config = Qwen3Config(**{**TINY_LLAMA_DEFAULTS, "head_dim": 16, "vocab_size": vocab_size, **overrides})
    return _save(Qwen3ForCausalLM, config, path, seed)


def make_tiny_mistral(path: str | Path, seed: int = 0, vocab_size: int = 256, **overrides: Any) -> Path:
    """Write a random MistralForCausalLM checkpoint into `path`: a sliding window of 7 positions, shorter than a
    KV block and than most test sequences, so a backend that ignores it gives other logits."""
    from transformers import MistralConfig, MistralForCausalLM

    config = MistralConfig(**{**TINY_LLAMA_DEFAULTS, "sliding_window": 7, "vocab_size": vocab_size, **overrides})
    return _save(MistralForCausalLM, config, path, seed)


def make_tiny_phi3(path: str | Path, seed: int = 0, vocab_size: int = 256, **overrides: Any) -> Path:
    """Write a random Phi3ForCausalLM checkpoint (fused qkv_proj and gate_up_proj tensors, RoPE on half of each
    head) into `path`."""
    from transformers import Phi3Config, Phi3ForCausalLM

    settings = {**TINY_LLAMA_DEFAULTS, "vocab_size": vocab_size, "pad_token_id": 0,
                "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5}}
    config = Phi3Config(**{**settings, **overrides})
    return _save(Phi3ForCausalLM, config, path, seed)


def make_tiny_gemma(path: str | Path, seed: int = 0, vocab_size: int = 256, **overrides: Any) -> Path:
    """Write a random GemmaForCausalLM checkpoint (tanh-GELU, norms scaling by 1 + w, embeddings scaled by
    sqrt(hidden), head_dim != hidden / heads, tied LM head) into `path`."""
    from transformers import GemmaConfig, GemmaForCausalLM

    settings = {**TINY_LLAMA_DEFAULTS, "head_dim": 24, "tie_word_embeddings": True, "vocab_size": vocab_size}
    config = GemmaConfig(**{**settings, **overrides})
    return _save(GemmaForCausalLM, config, path, seed)


def make_tiny_gemma2(path: str | Path, seed: int = 0, vocab_size: int = 256, **overrides: Any) -> Path:
    """Write a random Gemma2ForCausalLM checkpoint into `path`: sandwich norms, sliding (7 positions) and global
    layers, query_pre_attn_scalar, and soft caps on attention scores and logits small enough to change them."""
    from transformers import Gemma2Config, Gemma2ForCausalLM

    settings = {**TINY_LLAMA_DEFAULTS, "num_hidden_layers": 3, "head_dim": 24, "tie_word_embeddings": True,
                "vocab_size": vocab_size, "sliding_window": 7, "query_pre_attn_scalar": 20,
                "attn_logit_softcapping": 2.0, "final_logit_softcapping": 3.0}
    config = Gemma2Config(**{**settings, **overrides})
    return _save(Gemma2ForCausalLM, config, path, seed)


def make_tiny_gemma3(path: str | Path, seed: int = 0, vocab_size: int = 256, **overrides: Any) -> Path:
    """Write a random Gemma3ForCausalLM checkpoint (text only) into `path`: sandwich norms, q/k norms, local layers
    with a 7-position window and their own RoPE theta beside a global layer, query_pre_attn_scalar, and a final
    logit soft cap, every one of them set so that getting it wrong changes the logits."""
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    settings = {**TINY_LLAMA_DEFAULTS, "num_hidden_layers": 3, "head_dim": 24, "tie_word_embeddings": True,
                "vocab_size": vocab_size, "sliding_window": 7, "query_pre_attn_scalar": 20,
                "layer_types": ["sliding_attention", "full_attention", "sliding_attention"],
                "rope_parameters": {"sliding_attention": {"rope_type": "default", "rope_theta": 10.0},
                                    "full_attention": {"rope_type": "linear", "rope_theta": 10000.0, "factor": 2.0}},
                "final_logit_softcapping": 3.0}
    config = Gemma3TextConfig(**{**settings, **overrides})
    return _save(Gemma3ForCausalLM, config, path, seed)


def make_tiny_granite(path: str | Path, seed: int = 0, vocab_size: int = 256, **overrides: Any) -> Path:
    """Write a random GraniteForCausalLM checkpoint (embedding, residual, attention and logit multipliers that are
    not 1) into `path`."""
    from transformers import GraniteConfig, GraniteForCausalLM

    multipliers = {"embedding_multiplier": 3.0, "residual_multiplier": 0.5, "attention_multiplier": 0.2,
                   "logits_scaling": 2.5}
    config = GraniteConfig(**{**TINY_LLAMA_DEFAULTS, **multipliers, "vocab_size": vocab_size, **overrides})
    return _save(GraniteForCausalLM, config, path, seed)


def make_tiny_mixtral(path: str | Path, seed: int = 0, vocab_size: int = 256, **overrides: Any) -> Path:
    """Write a random MixtralForCausalLM checkpoint (6 experts, 2 per token, per-expert w1/w2/w3 tensors) into
    `path`."""
    from transformers import MixtralConfig, MixtralForCausalLM

    experts = {"num_local_experts": 6, "num_experts_per_tok": 2, "intermediate_size": 48}
    config = MixtralConfig(**{**TINY_LLAMA_DEFAULTS, **experts, "vocab_size": vocab_size, **overrides})
    return _save(MixtralForCausalLM, config, path, seed)


def make_tiny_qwen2_moe(path: str | Path, seed: int = 0, vocab_size: int = 256, **overrides: Any) -> Path:
    """Write a random Qwen2MoeForCausalLM checkpoint (q/k/v biases, 6 experts of which 2 per token, un-normalised
    top-k weights, a gated shared expert) into `path`."""
    from transformers import Qwen2MoeConfig, Qwen2MoeForCausalLM

    experts = {"num_experts": 6, "num_experts_per_tok": 2, "moe_intermediate_size": 48,
               "shared_expert_intermediate_size": 80, "norm_topk_prob": False}
    config = Qwen2MoeConfig(**{**TINY_LLAMA_DEFAULTS, **experts, "vocab_size": vocab_size, **overrides})
    return _save(Qwen2MoeForCausalLM, config, path, seed)


def make_tiny_qwen3_moe(path: str | Path, seed: int = 0, vocab_size: int = 256, **overrides: Any) -> Path:
    """Write a random Qwen3MoeForCausalLM checkpoint (q/k norms, 6 experts of which 3 per token, normalised top-k
    weights; layer 1 a dense MLP through mlp_only_layers) into `path`."""
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    experts = {"num_experts": 6, "num_experts_per_tok": 3, "moe_intermediate_size": 48, "norm_topk_prob": True,
               "mlp_only_layers": [1], "head_dim": 16}
    config = Qwen3MoeConfig(**{**TINY_LLAMA_DEFAULTS, **experts, "vocab_size": vocab_size, **overrides})
    return _save(Qwen3MoeForCausalLM, config, path, seed)


def make_tiny_granite_moe(path: str | Path, seed: int = 0, vocab_size: int = 256, **overrides: Any) -> Path:
    """Write a random GraniteMoeSharedForCausalLM checkpoint (Granite's multipliers, 6 stacked experts of which 2 per
    token, an un-gated shared MLP; ``shared_intermediate_size=0``: none) into `path`."""
    from transformers import GraniteMoeSharedConfig, GraniteMoeSharedForCausalLM

    granite = {"embedding_multiplier": 3.0, "residual_multiplier": 0.5, "attention_multiplier": 0.2,
               "logits_scaling": 2.5, "num_local_experts": 6, "num_experts_per_tok": 2, "intermediate_size": 48,
               "shared_intermediate_size": 40}
    config = GraniteMoeSharedConfig(**{**TINY_LLAMA_DEFAULTS, **granite, "vocab_size": vocab_size, **overrides})
    if not config.shared_intermediate_size:
        from transformers import GraniteMoeConfig, GraniteMoeForCausalLM

        plain = GraniteMoeConfig(**{key: value for key, value in config.to_dict().items()
                                    if key not in ("shared_intermediate_size", "model_type", "architectures")})
        return _save(GraniteMoeForCausalLM, plain, path, seed)
    return _save(GraniteMoeSharedForCausalLM, config, path, seed)


def make_tiny_olmo2(path: str | Path, seed: int = 0, vocab_size: int = 256, **overrides: Any) -> Path:
    """Write a random Olmo2ForCausalLM checkpoint (norms of the attention and MLP outputs only, q and k normed over
    all their heads) into `path`."""
    from transformers import Olmo2Config, Olmo2ForCausalLM

    config = Olmo2Config(**{**TINY_LLAMA_DEFAULTS, "vocab_size": vocab_size, **overrides})
    return _save(Olmo2ForCausalLM, config, path, seed)


def make_tiny_olmo3(path: str | Path, seed: int = 0, vocab_size: int = 256, **overrides: Any) -> Path:
    """Write a random Olmo3ForCausalLM checkpoint (OLMo 2's layer, layer 0 with a 6-position sliding window) into
    `path`."""
    from transformers import Olmo3Config, Olmo3ForCausalLM

    windows = {"sliding_window": 6, "layer_types": ["sliding_attention", "full_attention"]}
    config = Olmo3Config(**{**TINY_LLAMA_DEFAULTS, **windows, "vocab_size": vocab_size, **overrides})
    return _save(Olmo3ForCausalLM, config, path, seed)


def make_tiny_olmoe(path: str | Path, seed: int = 0, vocab_size: int = 256, **overrides: Any) -> Path:
    """Write a random OlmoeForCausalLM checkpoint (pre-norm layers, q and k normed over all their heads, 6 experts
    of which 2 per token, un-normalised top-k weights) into `path`."""
    from transformers import OlmoeConfig, OlmoeForCausalLM

    experts = {"num_experts": 6, "num_experts_per_tok": 2, "intermediate_size": 48, "norm_topk_prob": False}
    config = OlmoeConfig(**{**TINY_LLAMA_DEFAULTS, **experts, "vocab_size": vocab_size, **overrides})
    return _save(OlmoeForCausalLM, config, path, seed)


def make_tiny_flex_olmo(path: str | Path, seed: int = 0, vocab_size: int = 256, **overrides: Any) -> Path:
    """Write a random FlexOlmoForCausalLM checkpoint (OLMo 2's output-only norms and q/k norms over all heads,
    OLMoE's 6 experts of which 2 per token, normalised) into `path`."""
    from transformers import FlexOlmoConfig, FlexOlmoForCausalLM

    experts = {"num_experts": 6, "num_experts_per_tok": 2, "intermediate_size": 48, "norm_topk_prob": True}
    config = FlexOlmoConfig(**{**TINY_LLAMA_DEFAULTS, **experts, "vocab_size": vocab_size, **overrides})
    return _save(FlexOlmoForCausalLM, config, path, seed)


def make_tiny_glm4_moe(path: str | Path, seed: int = 0, vocab_size: int = 256, **overrides: Any) -> Path:
    """Write a random Glm4MoeForCausalLM checkpoint (GLM-4.5: q/k/v biases, per-head q/k norms, half-rotated heads;
    layer 0 dense, layer 1 routing 2 of 8 experts by sigmoid scores plus a random correction bias within the best 2
    of 4 groups, normalised and scaled, beside a shared expert) into `path`."""
    from transformers import Glm4MoeConfig, Glm4MoeForCausalLM

    experts = {"n_routed_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 48, "n_shared_experts": 1,
               "first_k_dense_replace": 1, "n_group": 4, "topk_group": 2, "norm_topk_prob": True,
               "routed_scaling_factor": 2.5, "use_qk_norm": True, "attention_bias": True, "head_dim": 16,
               "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5}}
    config = Glm4MoeConfig(**{**TINY_LLAMA_DEFAULTS, **experts, "vocab_size": vocab_size, **overrides})
    return _save(Glm4MoeForCausalLM, config, path, seed)


def make_tiny_dots1(path: str | Path, seed: int = 0, vocab_size: int = 256, **overrides: Any) -> Path:
    """Write a random Dots1ForCausalLM checkpoint (dots.llm1: per-head q/k norms; layer 0 dense, layer 1 routing 2
    of 6 experts by sigmoid scores plus a random correction bias, un-normalised and scaled, beside two shared
    experts) into `path`."""
    from transformers import Dots1Config, Dots1ForCausalLM

    experts = {"n_routed_experts": 6, "num_experts_per_tok": 2, "moe_intermediate_size": 48, "n_shared_experts": 2,
               "first_k_dense_replace": 1, "norm_topk_prob": False, "routed_scaling_factor": 1.5, "head_dim": 16}
    config = Dots1Config(**{**TINY_LLAMA_DEFAULTS, **experts, "vocab_size": vocab_size, **overrides})
    return _save(Dots1ForCausalLM, config, path, seed)


MLA_DEFAULTS: dict[str, Any] = {"kv_lora_rank": 24, "qk_nope_head_dim": 12, "qk_rope_head_dim": 8, "v_head_dim": 10,
                                "num_key_value_heads": 4, "head_dim": 8}
"""Latent attention in miniature: 4 heads of 12 + 8 query/key dims and 10 value dims over a 24-wide latent (HF's
configs keep head_dim at the rotary part)."""


def make_tiny_deepseek_v3(path: str | Path, seed: int = 0, vocab_size: int = 256, **overrides: Any) -> Path:
    """Write a random DeepseekV3ForCausalLM checkpoint (latent attention with a q latent and interleaved RoPE; layer
    0 dense, layer 1 routing 2 of 8 experts by sigmoid scores plus a correction bias within the best 2 of 4 groups,
    normalised and scaled, beside a shared expert) into `path`."""
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM

    experts = {"n_routed_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 48, "n_shared_experts": 1,
               "first_k_dense_replace": 1, "n_group": 4, "topk_group": 2, "norm_topk_prob": True,
               "routed_scaling_factor": 2.5, "q_lora_rank": 20}
    config = DeepseekV3Config(**{**TINY_LLAMA_DEFAULTS, **MLA_DEFAULTS, **experts, "vocab_size": vocab_size,
                                 **overrides})
    return _save(DeepseekV3ForCausalLM, config, path, seed)


def make_tiny_mistral4(path: str | Path, seed: int = 0, vocab_size: int = 256, **overrides: Any) -> Path:
    """Write a random Mistral4ForCausalLM checkpoint (Mistral Large 3's kind: DeepSeek-V3's latent attention with
    YaRN and Ministral 3's query temperature on every layer; layer 0 dense, layer 1 routing 2 of 8 experts by
    softmax within the best 2 of 4 groups (scored by their two best), normalised and scaled, beside a shared expert)
    into `path`."""
    from transformers import Mistral4Config, Mistral4ForCausalLM

    experts = {"n_routed_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 48, "n_shared_experts": 1,
               "first_k_dense_replace": 1, "n_group": 4, "topk_group": 2, "norm_topk_prob": True,
               "routed_scaling_factor": 1.5, "q_lora_rank": 20}
    head_dim = MLA_DEFAULTS["qk_rope_head_dim"] + MLA_DEFAULTS["qk_nope_head_dim"]  # its configs: the whole q/k head
    rope = {**MINISTRAL3_ROPE, "partial_rotary_factor": MLA_DEFAULTS["qk_rope_head_dim"] / head_dim}
    config = Mistral4Config(**{**TINY_LLAMA_DEFAULTS, **MLA_DEFAULTS, **experts, "head_dim": head_dim,
                               "rope_parameters": rope, "vocab_size": vocab_size, **overrides})
    return _save(Mistral4ForCausalLM, config, path, seed)


def make_tiny_deepseek_v2(path: str | Path, seed: int = 0, vocab_size: int = 256, **overrides: Any) -> Path:
    """Write a random DeepseekV2ForCausalLM checkpoint (DeepSeek-V2-Lite's shape: latent attention with q projected
    straight; every layer routing 2 of 6 experts by softmax, within the best 2 of 3 groups, scaled, beside two
    shared experts) into `path`."""
    from transformers import DeepseekV2Config, DeepseekV2ForCausalLM

    experts = {"n_routed_experts": 6, "num_experts_per_tok": 2, "moe_intermediate_size": 48, "n_shared_experts": 2,
               "first_k_dense_replace": 0, "topk_method": "group_limited_greedy", "n_group": 3, "topk_group": 2,
               "routed_scaling_factor": 1.5, "q_lora_rank": None}
    config = DeepseekV2Config(**{**TINY_LLAMA_DEFAULTS, **MLA_DEFAULTS, **experts, "vocab_size": vocab_size,
                                 **overrides})
    return _save(DeepseekV2ForCausalLM, config, path, seed)


def make_tiny_glm4_moe_lite(path: str | Path, seed: int = 0, vocab_size: int = 256, **overrides: Any) -> Path:
    """Write a random Glm4MoeLiteForCausalLM checkpoint (GLM-4.7-Flash: latent attention, layer 0 dense and layer 1
    routing 2 of 6 experts by sigmoid scores plus a correction bias, scaled) into `path`."""
    from transformers import Glm4MoeLiteConfig, Glm4MoeLiteForCausalLM

    experts = {"n_routed_experts": 6, "num_experts_per_tok": 2, "moe_intermediate_size": 48, "n_shared_experts": 1,
               "norm_topk_prob": True, "routed_scaling_factor": 1.8, "q_lora_rank": 20}
    mla = {key: value for key, value in MLA_DEFAULTS.items() if key != "head_dim"}  # GLM maps it to the rope dims
    config = Glm4MoeLiteConfig(**{**TINY_LLAMA_DEFAULTS, **mla, **experts, "vocab_size": vocab_size, **overrides})
    return _save(Glm4MoeLiteForCausalLM, config, path, seed)


def make_tiny_seed_oss(path: str | Path, seed: int = 0, vocab_size: int = 256, **overrides: Any) -> Path:
    """Write a random SeedOssForCausalLM checkpoint (q/k/v biases from attention_bias, an o_proj bias from
    attention_out_bias, MLP biases) into `path`."""
    from transformers import SeedOssConfig, SeedOssForCausalLM

    biases = {"attention_bias": True, "attention_out_bias": True, "mlp_bias": True, "head_dim": 16}
    config = SeedOssConfig(**{**TINY_LLAMA_DEFAULTS, **biases, "vocab_size": vocab_size, **overrides})
    return _save(SeedOssForCausalLM, config, path, seed)


def make_tiny_ernie4_5(path: str | Path, seed: int = 0, vocab_size: int = 256, **overrides: Any) -> Path:
    """Write a random Ernie4_5ForCausalLM checkpoint (use_bias: biases on every projection; RoPE over interleaved
    pairs) into `path`."""
    from transformers import Ernie4_5Config, Ernie4_5ForCausalLM

    config = Ernie4_5Config(**{**TINY_LLAMA_DEFAULTS, "use_bias": True, "head_dim": 16, "vocab_size": vocab_size,
                               **overrides})
    return _save(Ernie4_5ForCausalLM, config, path, seed)


def make_tiny_ernie4_5_moe(path: str | Path, seed: int = 0, vocab_size: int = 256, **overrides: Any) -> Path:
    """Write a random Ernie4_5_MoeForCausalLM checkpoint (biases on every projection and the LM head; layer 0 dense,
    layer 1 routing 2 of 6 experts by softmax plus a random correction bias, beside a shared expert) into `path`."""
    from transformers import Ernie4_5_MoeConfig, Ernie4_5_MoeForCausalLM

    experts = {"num_experts": 6, "num_experts_per_tok": 2, "moe_intermediate_size": 48, "moe_num_shared_experts": 1,
               "moe_layer_start_index": 1, "moe_layer_end_index": 1, "use_bias": True, "head_dim": 16,
               "tie_word_embeddings": False}
    config = Ernie4_5_MoeConfig(**{**TINY_LLAMA_DEFAULTS, **experts, "vocab_size": vocab_size, **overrides})
    return _save(Ernie4_5_MoeForCausalLM, config, path, seed)


def make_tiny_gpt_oss(path: str | Path, seed: int = 0, vocab_size: int = 256, **overrides: Any) -> Path:
    """Write a random GptOssForCausalLM checkpoint (attention sinks, q/k/v/o biases, layer 0 sliding over 6
    positions, YaRN RoPE; 2 of 6 biased experts per token with a biased router and the clamped activation, its
    limit low enough to bite) into `path` (HF's layout: stacked experts, gate and up columns interleaved)."""
    from transformers import GptOssConfig, GptOssForCausalLM

    experts = {"num_local_experts": 6, "num_experts_per_tok": 2, "intermediate_size": 48, "head_dim": 16,
               "sliding_window": 6, "layer_types": ["sliding_attention", "full_attention"], "swiglu_limit": 0.5,
               "rope_parameters": {"rope_type": "yarn", "rope_theta": 150000.0, "factor": 32.0, "beta_fast": 32.0,
                                   "beta_slow": 1.0, "truncate": False, "original_max_position_embeddings": 16}}
    config = GptOssConfig(**{**TINY_LLAMA_DEFAULTS, **experts, "vocab_size": vocab_size, **overrides})
    return _save(GptOssForCausalLM, config, path, seed)


LLAMA4_TEXT: dict[str, Any] = {
    "num_hidden_layers": 4, "head_dim": 16, "intermediate_size": 32, "intermediate_size_mlp": 48,
    "num_local_experts": 4, "moe_layers": [1, 2], "no_rope_layer_interval": 2, "attention_chunk_size": 8,
    "floor_scale": 4, "attn_scale": 0.3,
    "rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
                        "high_freq_factor": 4.0, "original_max_position_embeddings": 16},
}
"""Layers 0 and 2 rotate and attend within chunks of 8 (q/k L2-normed), 1 and 3 are NoPE layers over the whole
context with the query temperature (floor_scale 4: it grows from position 3 on); 1 and 2 route (4 experts and a
shared one), 0 and 3 are dense MLPs of intermediate_size_mlp."""


def make_tiny_llama4(path: str | Path, seed: int = 0, vocab_size: int = 256, **overrides: Any) -> Path:
    """Write a random Llama4ForCausalLM checkpoint (LLAMA4_TEXT's layers; HF's layout: stacked experts stored as
    they multiply, x @ w) into `path`."""
    from transformers import Llama4ForCausalLM, Llama4TextConfig

    config = Llama4TextConfig(**{**TINY_LLAMA_DEFAULTS, **LLAMA4_TEXT, "vocab_size": vocab_size, **overrides})
    return _save(Llama4ForCausalLM, config, path, seed)


def make_tiny_hunyuan_dense(path: str | Path, seed: int = 0, vocab_size: int = 256, **overrides: Any) -> Path:
    """Write a random HunYuanDenseV1ForCausalLM checkpoint (per-head q/k norms applied after RoPE, attention biases)
    into `path`."""
    from transformers import HunYuanDenseV1Config, HunYuanDenseV1ForCausalLM

    config = HunYuanDenseV1Config(**{**TINY_LLAMA_DEFAULTS, "attention_bias": True, "head_dim": 16,
                                     "vocab_size": vocab_size, **overrides})
    return _save(HunYuanDenseV1ForCausalLM, config, path, seed)


def make_tiny_hunyuan_moe(path: str | Path, seed: int = 0, vocab_size: int = 256, **overrides: Any) -> Path:
    """Write a random HunYuanMoEV1ForCausalLM checkpoint (Hunyuan-A13B's shape: q/k norms after RoPE, every layer
    routing 2 of 6 experts by softmax with a float32 router, beside a shared MLP, all intermediate_size wide) into
    `path`."""
    from transformers import HunYuanMoEV1Config, HunYuanMoEV1ForCausalLM

    config = HunYuanMoEV1Config(**{**TINY_LLAMA_DEFAULTS, "intermediate_size": 48, "num_experts": 6, "moe_topk": 2,
                                   "head_dim": 16, "vocab_size": vocab_size, **overrides})
    return _save(HunYuanMoEV1ForCausalLM, config, path, seed)


def make_tiny_minimax_m2(path: str | Path, seed: int = 0, vocab_size: int = 256, **overrides: Any) -> Path:
    """Write a random MiniMaxM2ForCausalLM checkpoint (q and k RMS-normed over all heads, RoPE on half of each head
    through the released configs' ``rotary_dim``, every layer routing 2 of 6 experts by sigmoid scores plus a
    correction bias, normalised) into `path`."""
    from transformers import MiniMaxM2Config, MiniMaxM2ForCausalLM

    config = MiniMaxM2Config(**{**TINY_LLAMA_DEFAULTS, "intermediate_size": 48, "num_local_experts": 6,
                                "num_experts_per_tok": 2, "head_dim": 16, "rotary_dim": 8, "vocab_size": vocab_size,
                                **overrides})
    return _save(MiniMaxM2ForCausalLM, config, path, seed)


def make_tiny_apertus(path: str | Path, seed: int = 0, vocab_size: int = 256, **overrides: Any) -> Path:
    """Write a random ApertusForCausalLM checkpoint (per-head q/k norms, an MLP without a gate through xIELU with
    random learned coefficients per layer, attention_layernorm and feedforward_layernorm) into `path`."""
    from safetensors.torch import load_file, save_file
    from transformers import ApertusConfig, ApertusForCausalLM

    rope = {"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 32}
    config = ApertusConfig(**{**TINY_LLAMA_DEFAULTS, "head_dim": 16, "rope_parameters": rope, "vocab_size": vocab_size,
                              **overrides})
    path = _save(ApertusForCausalLM, config, path, seed)
    tensors = load_file(str(path / "model.safetensors"))
    generator = torch.Generator().manual_seed(seed)
    for name in [n for n in tensors if n.endswith(("act_fn.alpha_p", "act_fn.alpha_n"))]:
        tensors[name] = tensors[name] + torch.randn(1, generator=generator)
    save_file(tensors, str(path / "model.safetensors"), metadata={"format": "pt"})
    return path


def make_tiny_smollm3(path: str | Path, seed: int = 0, vocab_size: int = 256, **overrides: Any) -> Path:
    """Write a random SmolLM3ForCausalLM checkpoint (layer 1 a NoPE layer: no positions in its attention) into
    `path`."""
    from transformers import SmolLM3Config, SmolLM3ForCausalLM

    config = SmolLM3Config(**{**TINY_LLAMA_DEFAULTS, "no_rope_layer_interval": 2, "vocab_size": vocab_size,
                              **overrides})
    return _save(SmolLM3ForCausalLM, config, path, seed)


def make_tiny_ministral(path: str | Path, seed: int = 0, vocab_size: int = 256, **overrides: Any) -> Path:
    """Write a random MinistralForCausalLM checkpoint (layer 0 with a 6-position sliding window) into `path`."""
    from transformers import MinistralConfig, MinistralForCausalLM

    windows = {"sliding_window": 6, "layer_types": ["sliding_attention", "full_attention"]}
    config = MinistralConfig(**{**TINY_LLAMA_DEFAULTS, **windows, "head_dim": 16, "vocab_size": vocab_size,
                                **overrides})
    return _save(MinistralForCausalLM, config, path, seed)


def make_tiny_glm4(path: str | Path, seed: int = 0, vocab_size: int = 256, **overrides: Any) -> Path:
    """Write a random Glm4ForCausalLM checkpoint (interleaved partial RoPE, q/k/v biases, a fused gate_up_proj,
    sandwich norms under GLM-4's names) into `path`."""
    from transformers import Glm4Config, Glm4ForCausalLM

    config = Glm4Config(**{**TINY_LLAMA_DEFAULTS, "head_dim": 16, "vocab_size": vocab_size, **overrides})
    return _save(Glm4ForCausalLM, config, path, seed)


def make_tiny_glm(path: str | Path, seed: int = 0, vocab_size: int = 256, **overrides: Any) -> Path:
    """Write a random GlmForCausalLM checkpoint (GLM-4's attention and MLP, pre-norm only) into `path`."""
    from transformers import GlmConfig, GlmForCausalLM

    config = GlmConfig(**{**TINY_LLAMA_DEFAULTS, "head_dim": 16, "vocab_size": vocab_size, **overrides})
    return _save(GlmForCausalLM, config, path, seed)


def make_tiny_cohere(path: str | Path, seed: int = 0, vocab_size: int = 256, **overrides: Any) -> Path:
    """Write a random CohereForCausalLM checkpoint (LayerNorm, attention and MLP side by side on one normed input,
    interleaved RoPE, tied embeddings, a logit scale) into `path`."""
    from transformers import CohereConfig, CohereForCausalLM

    cohere = {"logit_scale": 0.5, "tie_word_embeddings": True, "layer_norm_eps": 1e-5}
    config = CohereConfig(**{**TINY_LLAMA_DEFAULTS, **cohere, "vocab_size": vocab_size, **overrides})
    return _save(CohereForCausalLM, config, path, seed)


def make_tiny_cohere2(path: str | Path, seed: int = 0, vocab_size: int = 256, **overrides: Any) -> Path:
    """Write a random Cohere2ForCausalLM checkpoint (Cohere's layer; layer 0 slides over 6 positions with RoPE,
    layer 1 attends to all without positions) into `path`."""
    from transformers import Cohere2Config, Cohere2ForCausalLM

    cohere = {"logit_scale": 0.5, "tie_word_embeddings": True, "layer_norm_eps": 1e-5, "sliding_window": 6,
              "layer_types": ["sliding_attention", "full_attention"]}
    config = Cohere2Config(**{**TINY_LLAMA_DEFAULTS, **cohere, "vocab_size": vocab_size, **overrides})
    return _save(Cohere2ForCausalLM, config, path, seed)


def make_tiny_phi2(path: str | Path, seed: int = 0, vocab_size: int = 256, **overrides: Any) -> Path:
    """Write a random PhiForCausalLM checkpoint (Phi-2: LayerNorms with biases, attention and an ungated MLP side by
    side, partial RoPE, biases on every projection and the LM head) into `path`."""
    from transformers import PhiConfig, PhiForCausalLM

    phi = {"partial_rotary_factor": 0.5, "layer_norm_eps": 1e-5, "hidden_act": "gelu_new"}
    config = PhiConfig(**{**TINY_LLAMA_DEFAULTS, **phi, "vocab_size": vocab_size, **overrides})
    return _save(PhiForCausalLM, config, path, seed)


def make_tiny_starcoder2(path: str | Path, seed: int = 0, vocab_size: int = 256, **overrides: Any) -> Path:
    """Write a random Starcoder2ForCausalLM checkpoint (LayerNorms with biases, an ungated MLP, biases on every
    projection, a 6-position sliding window) into `path`."""
    from transformers import Starcoder2Config, Starcoder2ForCausalLM

    coder = {"norm_epsilon": 1e-5, "sliding_window": 6, "use_bias": True, "hidden_act": "gelu_pytorch_tanh"}
    config = Starcoder2Config(**{**TINY_LLAMA_DEFAULTS, **coder, "vocab_size": vocab_size, **overrides})
    return _save(Starcoder2ForCausalLM, config, path, seed)


def make_tiny_nemotron(path: str | Path, seed: int = 0, vocab_size: int = 256, **overrides: Any) -> Path:
    """Write a random NemotronForCausalLM checkpoint (LayerNorms scaling by 1 + w with biases, an ungated relu^2
    MLP, partial RoPE) into `path`."""
    from transformers import NemotronConfig, NemotronForCausalLM

    nemotron = {"partial_rotary_factor": 0.5, "norm_eps": 1e-5}
    config = NemotronConfig(**{**TINY_LLAMA_DEFAULTS, **nemotron, "vocab_size": vocab_size, **overrides})
    return _save(NemotronForCausalLM, config, path, seed)


def make_tiny_arcee(path: str | Path, seed: int = 0, vocab_size: int = 256, **overrides: Any) -> Path:
    """Write a random ArceeForCausalLM checkpoint (Llama with an ungated relu^2 MLP) into `path`."""
    from transformers import ArceeConfig, ArceeForCausalLM

    config = ArceeConfig(**{**TINY_LLAMA_DEFAULTS, "vocab_size": vocab_size, **overrides})
    return _save(ArceeForCausalLM, config, path, seed)


def make_tiny_exaone4(path: str | Path, seed: int = 0, vocab_size: int = 256, **overrides: Any) -> Path:
    """Write a random Exaone4ForCausalLM checkpoint (output-only norms, per-head q/k norms; layer 0 slides over 6
    positions with RoPE, layer 1 attends to all without positions) into `path`."""
    from transformers import Exaone4Config, Exaone4ForCausalLM

    windows = {"sliding_window": 6, "layer_types": ["sliding_attention", "full_attention"], "head_dim": 16}
    config = Exaone4Config(**{**TINY_LLAMA_DEFAULTS, **windows, "vocab_size": vocab_size, **overrides})
    return _save(Exaone4ForCausalLM, config, path, seed)


MINISTRAL3_ROPE: dict[str, Any] = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                                   "original_max_position_embeddings": 8, "beta_fast": 32.0, "beta_slow": 1.0,
                                   "mscale": 1.0, "mscale_all_dim": 1.0, "llama_4_scaling_beta": 0.5}
"""Ministral 3's YaRN with its query temperature, stepping up every 8 positions (the released models: 16384)."""


def make_tiny_ministral3(path: str | Path, seed: int = 0, vocab_size: int = 256, **overrides: Any) -> Path:
    """Write a random Ministral3ForCausalLM checkpoint (Mistral with YaRN and every layer's queries scaled by
    log1p(floor(p / 8)) * 0.5 + 1) into `path`."""
    from transformers import Ministral3Config, Ministral3ForCausalLM

    config = Ministral3Config(**{**TINY_LLAMA_DEFAULTS, "head_dim": 16, "rope_parameters": MINISTRAL3_ROPE,
                                 "vocab_size": vocab_size, **overrides})
    return _save(Ministral3ForCausalLM, config, path, seed)


def make_tiny_gemma3_vision(path: str | Path, seed: int = 0, vocab_size: int = 256, **overrides: Any) -> Path:
    """Write a random Gemma3ForConditionalGeneration checkpoint (a tiny SigLIP tower and projector beside the
    language model, stored under ``language_model.``) into `path`; ``overrides`` go to its text config."""
    from transformers import Gemma3Config, Gemma3ForConditionalGeneration, Gemma3TextConfig, SiglipVisionConfig

    text = Gemma3TextConfig(**{**TINY_LLAMA_DEFAULTS, "head_dim": 16, "sliding_window": 6,
                               "layer_types": ["sliding_attention", "full_attention"], "vocab_size": vocab_size,
                               **overrides})
    vision = SiglipVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                                image_size=28, patch_size=14)
    config = Gemma3Config(text_config=text, vision_config=vision, mm_tokens_per_image=4,
                          image_token_index=vocab_size - 1, boi_token_index=vocab_size - 3,
                          eoi_token_index=vocab_size - 2, initializer_range=0.1)
    return _save(Gemma3ForConditionalGeneration, config, path, seed)


def make_tiny_mistral3_vision(path: str | Path, seed: int = 0, vocab_size: int = 256, ministral3: bool = False,
                              **overrides: Any) -> Path:
    """Write a random Mistral3ForConditionalGeneration checkpoint (a tiny Pixtral tower and projector beside an
    untied Mistral language model, or ``ministral3``'s as Ministral 3 releases have) into `path`; ``overrides`` go
    to its text config."""
    from transformers import (
        Ministral3Config,
        Mistral3Config,
        Mistral3ForConditionalGeneration,
        MistralConfig,
        PixtralVisionConfig,
    )

    if ministral3:
        text = Ministral3Config(**{**TINY_LLAMA_DEFAULTS, "head_dim": 16, "rope_parameters": MINISTRAL3_ROPE,
                                   "vocab_size": vocab_size, **overrides})
    else:
        text = MistralConfig(**{**TINY_LLAMA_DEFAULTS, "vocab_size": vocab_size, **overrides})
    vision = PixtralVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                                 image_size=28, patch_size=14, head_dim=16)
    config = Mistral3Config(text_config=text, vision_config=vision, image_token_index=vocab_size - 1,
                            tie_word_embeddings=False)
    return _save(Mistral3ForConditionalGeneration, config, path, seed)


def make_tiny_llama4_vision(path: str | Path, seed: int = 0, vocab_size: int = 256, **overrides: Any) -> Path:
    """Write a random Llama4ForConditionalGeneration checkpoint (a tiny vision model and projector beside a Llama 4
    language model, stored under ``language_model.``) into `path`; ``overrides`` go to its text config."""
    from transformers import Llama4Config, Llama4ForConditionalGeneration, Llama4TextConfig, Llama4VisionConfig

    text = Llama4TextConfig(**{**TINY_LLAMA_DEFAULTS, **LLAMA4_TEXT, "vocab_size": vocab_size, **overrides})
    vision = Llama4VisionConfig(hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=16,
                                image_size=28, patch_size=14, vision_output_dim=16, projector_input_dim=16,
                                projector_output_dim=text.hidden_size)
    config = Llama4Config(text_config=text, vision_config=vision, boi_token_index=vocab_size - 3,
                          eoi_token_index=vocab_size - 2, image_token_index=vocab_size - 1)
    return _save(Llama4ForConditionalGeneration, config, path, seed)


QWEN_VL_TEXT: dict[str, Any] = {"rope_parameters": {"rope_type": "default", "rope_theta": 10000.0,
                                                     "mrope_section": [2, 3, 3]}}
"""Multimodal RoPE over the tiny heads' 8 frequencies: 2 temporal, 3 height, 3 width."""
QWEN_VL_TOKENS: dict[str, Any] = {"image_token_id": 255, "video_token_id": 254, "vision_start_token_id": 253}


def make_tiny_qwen2_vl_vision(path: str | Path, seed: int = 0, vocab_size: int = 256, **overrides: Any) -> Path:
    """Write a random Qwen2VLForConditionalGeneration checkpoint (a one-block vision tower beside a Qwen2 language
    model with multimodal RoPE) into `path`; ``overrides`` go to its text config."""
    from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration

    text = {**TINY_LLAMA_DEFAULTS, **QWEN_VL_TEXT, "vocab_size": vocab_size, **overrides}
    vision = {"depth": 1, "embed_dim": 32, "hidden_size": text["hidden_size"], "num_heads": 2, "patch_size": 14}
    config = Qwen2VLConfig(text_config=text, vision_config=vision, **QWEN_VL_TOKENS)
    return _save(Qwen2VLForConditionalGeneration, config, path, seed)


def make_tiny_qwen2_5_vl_vision(path: str | Path, seed: int = 0, vocab_size: int = 256, **overrides: Any) -> Path:
    """Write a random Qwen2_5_VLForConditionalGeneration checkpoint (HF saves it in the hub's layout: the language
    model as ``model.``, the tower as ``visual.``) into `path`; ``overrides`` go to its text config."""
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    text = {**TINY_LLAMA_DEFAULTS, **QWEN_VL_TEXT, "vocab_size": vocab_size, **overrides}
    vision = {"depth": 1, "hidden_size": 32, "num_heads": 2, "intermediate_size": 64,
              "out_hidden_size": text["hidden_size"], "patch_size": 14, "fullatt_block_indexes": [0]}
    config = Qwen2_5_VLConfig(text_config=text, vision_config=vision, **QWEN_VL_TOKENS)
    return _save(Qwen2_5_VLForConditionalGeneration, config, path, seed)


def make_tiny_qwen3_vl_vision(path: str | Path, seed: int = 0, vocab_size: int = 256, **overrides: Any) -> Path:
    """Write a random Qwen3VLForConditionalGeneration checkpoint (a Qwen3 language model with interleaved
    multimodal RoPE under ``model.language_model.``, a tower with deepstack features) into `path`."""
    from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration

    rope = {**QWEN_VL_TEXT["rope_parameters"], "mrope_interleaved": True}
    text = {**TINY_LLAMA_DEFAULTS, "head_dim": 16, "rope_parameters": rope, "vocab_size": vocab_size, **overrides}
    vision = {"depth": 1, "hidden_size": 32, "num_heads": 2, "intermediate_size": 64,
              "out_hidden_size": text["hidden_size"], "patch_size": 14, "deepstack_visual_indexes": [0],
              "num_position_embeddings": 16}
    config = Qwen3VLConfig(text_config=text, vision_config=vision, **QWEN_VL_TOKENS)
    return _save(Qwen3VLForConditionalGeneration, config, path, seed)


def make_tiny_qwen3_vl_moe_vision(path: str | Path, seed: int = 0, vocab_size: int = 256, hub_layout: bool = False,
                                  **overrides: Any) -> Path:
    """Write a random Qwen3VLMoeForConditionalGeneration checkpoint (layer 0 routing 3 of 6 stacked experts, layer 1
    dense) into `path`. ``hub_layout``: the experts stacked as the released checkpoints hold them, [experts, in, out]
    (transformers transposes them at load), instead of transformers' own [experts, out, in]."""
    from safetensors.torch import load_file, save_file
    from transformers import Qwen3VLMoeConfig, Qwen3VLMoeForConditionalGeneration

    rope = {**QWEN_VL_TEXT["rope_parameters"], "mrope_interleaved": True}
    experts = {"num_experts": 6, "num_experts_per_tok": 3, "moe_intermediate_size": 48, "norm_topk_prob": True,
               "mlp_only_layers": [1]}
    text = {**TINY_LLAMA_DEFAULTS, **experts, "head_dim": 16, "rope_parameters": rope, "vocab_size": vocab_size,
            **overrides}
    vision = {"depth": 1, "hidden_size": 32, "num_heads": 2, "intermediate_size": 64,
              "out_hidden_size": text["hidden_size"], "patch_size": 14, "deepstack_visual_indexes": [0],
              "num_position_embeddings": 16}
    config = Qwen3VLMoeConfig(text_config=text, vision_config=vision, **QWEN_VL_TOKENS)
    path = _save(Qwen3VLMoeForConditionalGeneration, config, path, seed)
    if hub_layout:
        tensors = load_file(str(path / "model.safetensors"))
        for name in [n for n in tensors if n.endswith(("experts.gate_up_proj", "experts.down_proj"))]:
            tensors[name] = tensors[name].transpose(1, 2).contiguous()
        save_file(tensors, str(path / "model.safetensors"), metadata={"format": "pt"})
    return path


def _save(model_class: Any, config: Any, path: str | Path, seed: int) -> Path:
    torch.manual_seed(seed)
    model = model_class(config).to(torch.float32)
    _randomise_small_params(model)
    path = Path(path)
    model.save_pretrained(path)
    return path


def _randomise_small_params(model: torch.nn.Module) -> None:
    """Give norms and biases random values too, so a weight routed to the wrong place changes the output (and the
    routers' correction biases, buffers HF starts at zero)."""
    with torch.no_grad():
        for name, tensor in [*model.named_buffers(), *model.named_parameters()]:
            if name.endswith("e_score_correction_bias"):
                tensor.copy_(0.1 * torch.randn_like(tensor))
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                param.copy_(1.0 + 0.1 * torch.randn_like(param))
            elif name.endswith((".bias", "experts.gate_up_proj_bias", "experts.down_proj_bias")):  # GPT-OSS's too
                param.copy_(0.1 * torch.randn_like(param))
            elif name.endswith("self_attn.sinks"):
                param.copy_(torch.randn_like(param))


def make_tiny_llama_gguf(path: str | Path, seed: int = 0, vocab_size: int = 256) -> Path:
    """Write a random fp32 llama GGUF file (no tokenizer) at `path` (a file name ending in .gguf)."""
    import gguf
    import numpy as np

    sizes = TINY_LLAMA_DEFAULTS
    hidden, inter = sizes["hidden_size"], sizes["intermediate_size"]
    heads, kv_heads = sizes["num_attention_heads"], sizes["num_key_value_heads"]
    head_dim = hidden // heads
    rng = np.random.default_rng(seed)
    path = Path(path)
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_context_length(sizes["max_position_embeddings"])
    writer.add_embedding_length(hidden)
    writer.add_block_count(sizes["num_hidden_layers"])
    writer.add_feed_forward_length(inter)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(sizes["rms_norm_eps"])
    writer.add_vocab_size(vocab_size)

    def add(name: str, *shape: int, around: float = 0.0) -> None:
        values = around + sizes["initializer_range"] * rng.standard_normal(shape)
        writer.add_tensor(name, values.astype(np.float32))

    add("token_embd.weight", vocab_size, hidden)
    for i in range(sizes["num_hidden_layers"]):
        add(f"blk.{i}.attn_norm.weight", hidden, around=1.0)
        add(f"blk.{i}.attn_q.weight", heads * head_dim, hidden)
        add(f"blk.{i}.attn_k.weight", kv_heads * head_dim, hidden)
        add(f"blk.{i}.attn_v.weight", kv_heads * head_dim, hidden)
        add(f"blk.{i}.attn_output.weight", hidden, heads * head_dim)
        add(f"blk.{i}.ffn_norm.weight", hidden, around=1.0)
        add(f"blk.{i}.ffn_gate.weight", inter, hidden)
        add(f"blk.{i}.ffn_up.weight", inter, hidden)
        add(f"blk.{i}.ffn_down.weight", hidden, inter)
    add("output_norm.weight", hidden, around=1.0)
    add("output.weight", vocab_size, hidden)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
