"""Where a latent-attention layer's checkpoint tensors go (DeepSeek-V2/V3 names), sliced by query heads under tensor
parallelism; the latents' down projections and norms are whole on every rank."""

from __future__ import annotations

from typing import TYPE_CHECKING

from executor_svc.models.mla import MlaAttention
from executor_svc.models.weight_targets import Targets, part_target, whole_target

if TYPE_CHECKING:
    from transformers import PretrainedConfig


def mla_targets(prefix: str, attn: MlaAttention, config: PretrainedConfig, o_name: str) -> dict[str, Targets]:
    """``self_attn.q_proj`` (or ``q_a_proj``, ``q_a_layernorm``, ``q_b_proj``), ``kv_a_proj_with_mqa``,
    ``kv_a_layernorm``, ``kv_b_proj`` and the output projection ``o_name``, with biases under attention_bias."""
    settings, tp = attn.settings, attn.tp
    heads, offset = config.num_attention_heads, attn.head_offset
    q_width = settings.qk_nope_head_dim + settings.qk_rope_head_dim
    kv_width = settings.qk_nope_head_dim + settings.v_head_dim
    block = prefix + "self_attn."
    targets: dict[str, Targets] = {
        block + "kv_a_proj_with_mqa.weight": whole_target(attn.kv_a_weight),
        block + "kv_a_layernorm.weight": whole_target(attn.kv_a_norm_weight),
        block + "kv_b_proj.weight": part_target(tp, attn.kv_b_weight.data, 0, offset * kv_width, heads * kv_width),
        f"{prefix}{o_name}.weight": part_target(tp, attn.o_weight.data, 1, offset * settings.v_head_dim,
                                                heads * settings.v_head_dim),
    }
    optional = {
        block + "q_proj.weight": (attn.q_weight, True),
        block + "q_a_proj.weight": (attn.q_a_weight, False),
        block + "q_a_proj.bias": (attn.q_a_bias, False),
        block + "q_a_layernorm.weight": (attn.q_a_norm_weight, False),
        block + "q_b_proj.weight": (attn.q_b_weight, True),
        block + "kv_a_proj_with_mqa.bias": (attn.kv_a_bias, False),
        f"{prefix}{o_name}.bias": (attn.o_bias, False),
    }
    for name, (param, by_head) in optional.items():
        if param is not None:
            targets[name] = (part_target(tp, param.data, 0, offset * q_width, heads * q_width) if by_head
                             else whole_target(param))
    return targets
