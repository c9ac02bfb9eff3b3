"""What a multi-head latent attention config says (DeepSeek-V2/V3, Moonlight, GLM-4.7-Flash)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from executor_svc.models.rope import rope_parameters

if TYPE_CHECKING:
    from transformers import PretrainedConfig

MLA_TYPES = ("deepseek_v2", "deepseek_v3", "glm4_moe_lite", "mistral4")
"""model_types whose attention is multi-head latent attention."""
LATENT_NORM_EPS = 1e-6
"""The epsilon of the q and kv latents' RMSNorms (HF builds them with its RMSNorm default, not rms_norm_eps)."""


@dataclass(frozen=True)
class MlaSettings:
    """Multi-head latent attention: keys and values come from one compressed latent per token (``kv_lora_rank``
    wide, RMS-normed) that every head up-projects, plus a ``qk_rope_head_dim`` rotated key part shared by all heads;
    queries come straight from the hidden state or through their own latent (``q_lora_rank``)."""

    q_lora_rank: int | None
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    rope_interleaved: bool
    """RoPE turns pairs (2i, 2i + 1) (DeepSeek-V2 always; V3's rope_interleave) rather than halves."""
    scale: float
    """The softmax scale: (nope + rope dims) ** -0.5, times YaRN's mscale squared where set."""
    biased: bool
    """attention_bias: the latents' down projections and o_proj add biases."""

    def __post_init__(self) -> None:
        for name in ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: must be >= 1, got {getattr(self, name)}")
        if self.qk_rope_head_dim % 2:
            raise ValueError(f"qk_rope_head_dim: must be even, got {self.qk_rope_head_dim}")
        if self.q_lora_rank is not None and self.q_lora_rank < 1:
            raise ValueError(f"q_lora_rank: must be >= 1 or null, got {self.q_lora_rank}")

    @property
    def cache_head_dim(self) -> int:
        """What the paged cache holds per token and layer: the normed latent and the rotated shared key part."""
        return self.kv_lora_rank + self.qk_rope_head_dim


def mla_settings_for(config: PretrainedConfig) -> MlaSettings | None:
    """The MLA settings of a config (None: ordinary attention); ValueError naming a field out of range."""
    model_type = getattr(config, "model_type", None)
    if model_type not in MLA_TYPES:
        return None
    q_lora_rank = getattr(config, "q_lora_rank", None)
    return MlaSettings(
        q_lora_rank=int(q_lora_rank) if q_lora_rank else None,
        kv_lora_rank=int(config.kv_lora_rank),
        qk_nope_head_dim=int(config.qk_nope_head_dim),
        qk_rope_head_dim=int(config.qk_rope_head_dim),
        v_head_dim=int(config.v_head_dim),
        rope_interleaved=model_type == "deepseek_v2" or bool(getattr(config, "rope_interleave", True)),
        scale=_softmax_scale(config),
        biased=bool(getattr(config, "attention_bias", False)),
    )


def _softmax_scale(config: PretrainedConfig) -> float:
    """(nope + rope) ** -0.5, times mscale(factor, mscale_all_dim) squared for scaled RoPE (DeepSeek's YaRN)."""
    scale = float(int(config.qk_nope_head_dim) + int(config.qk_rope_head_dim)) ** -0.5
    params = rope_parameters(config)
    mscale_all_dim = params.get("mscale_all_dim", 0)
    factor = float(params.get("factor", 1.0) or 1.0)
    if params["rope_type"] != "default" and mscale_all_dim and factor > 1:
        mscale = 0.1 * float(mscale_all_dim) * math.log(factor) + 1.0
        scale *= mscale * mscale
    return scale
