"""Multi-head latent attention (DeepSeek-V2/V3) over a paged cache of latents, with the up-projections absorbed.

The cache holds one [kv_lora_rank + qk_rope_head_dim] vector per token and layer, the normed latent beside the
rotated shared key part, as a single KV head: every query head attends to it (multi-query attention). Each head's
key up-projection is folded into its query (q_nope . (W_uk c) = (W_uk^T q_nope) . c), and its value up-projection
applied after the attention (sum_s p_s W_uv c_s = W_uv sum_s p_s c_s): the same scores and outputs as HF's
decompressed keys and values, from a cache 2 * heads * 192 / 576 times smaller (DeepSeek-V3: 85x).

The cached vector serves as key and value: the attention's output keeps its first kv_lora_rank dimensions (the
latent's weighted sum), the rotated part's sum is dropped."""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

import torch
from torch import nn

from executor_svc.attention.backend import AttentionBackend
from executor_svc.attention.metadata import AttentionMetadata
from executor_svc.lora.projection import AdapterRows
from executor_svc.models.layers import linear, rms_norm
from executor_svc.models.mla_settings import LATENT_NORM_EPS, MlaSettings
from executor_svc.models.rope import apply_rotary, apply_rotary_interleaved
from executor_svc.parallel.tensor_parallel import SINGLE, TensorParallel

if TYPE_CHECKING:
    from transformers import PretrainedConfig


class MlaAttention(nn.Module):
    """Latent attention over the paged cache (see the module docstring).

    Under tensor parallelism each rank holds its share of the query heads (their rows of q_proj / q_b_proj and
    kv_b_proj, their columns of o_proj, summed over ranks); the latents' down projections are replicated, so every
    rank caches the whole latent."""

    def __init__(self, config: PretrainedConfig, settings: MlaSettings, attention_backend: AttentionBackend,
                 tp: TensorParallel = SINGLE, sliding_window: int | None = None) -> None:
        super().__init__()
        self.settings = settings
        self.tp = tp
        start, end = tp.split(config.num_attention_heads, "num_attention_heads")
        self.num_heads, self.head_offset = end - start, start
        """This rank's query heads, and the first of them in the checkpoint."""
        self.num_kv_heads, self.kv_head_offset = 1, 0
        self.head_dim = settings.cache_head_dim
        """The cached vector's width (the KV cache's head_dim)."""
        self.scale = settings.scale
        self.sliding_window = sliding_window
        self.backend = attention_backend
        self.rotate = apply_rotary_interleaved if settings.rope_interleaved else apply_rotary
        hidden, rank, rope = config.hidden_size, settings.kv_lora_rank, settings.qk_rope_head_dim
        q_rows = self.num_heads * (settings.qk_nope_head_dim + rope)
        q_rank = settings.q_lora_rank
        self.q_weight = _weight(q_rows, hidden) if q_rank is None else None
        self.q_a_weight = _weight(q_rank, hidden) if q_rank is not None else None
        self.q_a_bias = _zeros(q_rank) if q_rank is not None and settings.biased else None
        self.q_a_norm_weight = _ones(q_rank) if q_rank is not None else None
        self.q_b_weight = _weight(q_rows, q_rank) if q_rank is not None else None
        self.kv_a_weight = _weight(rank + rope, hidden)
        self.kv_a_bias = _zeros(rank + rope) if settings.biased else None
        self.kv_a_norm_weight = _ones(rank)
        self.kv_b_weight = _weight(self.num_heads * (settings.qk_nope_head_dim + settings.v_head_dim), rank)
        """Each head's key (nope) rows then value rows, as kv_b_proj stores them."""
        self.o_weight = _weight(hidden, self.num_heads * settings.v_head_dim)
        self.o_bias = _zeros(hidden) if settings.biased else None

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, kv_layer: torch.Tensor,
                meta: AttentionMetadata, adapters: AdapterRows | None = None,
                query_scale: torch.Tensor | None = None) -> torch.Tensor:
        """x [T, hidden] -> [T, hidden] (``adapters``: unused, LoRA adapters of latent attention are refused;
        ``query_scale`` [T, 1, 1]: multiplies the queries, Mistral 4's temperature, applied to the absorbed query as
        the scores are linear in it)."""
        settings, rank = self.settings, self.settings.kv_lora_rank
        q_nope, q_rope = self._queries(x).split([settings.qk_nope_head_dim, settings.qk_rope_head_dim], dim=-1)
        latent, k_rope = linear(x, self.kv_a_weight, self.kv_a_bias).split([rank, settings.qk_rope_head_dim], dim=-1)
        latent = rms_norm(latent, self.kv_a_norm_weight, LATENT_NORM_EPS)
        k_rope = self.rotate(k_rope.unsqueeze(1), cos, sin)
        cached = torch.cat((latent.unsqueeze(1), k_rope), dim=-1)  # [T, 1, rank + rope]
        key_up, value_up = self._up_projections()
        absorbed = torch.bmm(q_nope.transpose(0, 1), key_up).transpose(0, 1)  # [T, H, rank]
        query = torch.cat((absorbed, self.rotate(q_rope, cos, sin)), dim=-1)
        if query_scale is not None:
            query = (query * query_scale).to(query.dtype)
        out = self.backend.forward(query, cached, cached, kv_layer, meta, self.scale,
                                   sliding_window=self.sliding_window)
        values = torch.bmm(out[..., :rank].transpose(0, 1), value_up.transpose(1, 2)).transpose(0, 1)
        return self._project_out(values.reshape(x.shape[0], -1))

    def _queries(self, x: torch.Tensor) -> torch.Tensor:
        """x [T, hidden] -> q [T, H, nope + rope], straight or through the q latent."""
        if self.q_weight is not None:
            return linear(x, self.q_weight).view(x.shape[0], self.num_heads, -1)
        q_latent = linear(x, cast(torch.Tensor, self.q_a_weight), self.q_a_bias)
        q_latent = rms_norm(q_latent, cast(torch.Tensor, self.q_a_norm_weight), LATENT_NORM_EPS)
        return linear(q_latent, cast(torch.Tensor, self.q_b_weight)).view(x.shape[0], self.num_heads, -1)

    def _up_projections(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Each head's key up-projection [H, nope, rank] and value up-projection [H, v, rank] (views of kv_b)."""
        settings = self.settings
        per_head = self.kv_b_weight.view(self.num_heads, settings.qk_nope_head_dim + settings.v_head_dim, -1)
        return per_head[:, : settings.qk_nope_head_dim], per_head[:, settings.qk_nope_head_dim :]

    def _project_out(self, values: torch.Tensor) -> torch.Tensor:
        """[T, H * v] -> [T, hidden], summed over ranks under tensor parallelism (the bias added once)."""
        if not self.tp.enabled:
            return linear(values, self.o_weight, self.o_bias)
        summed = self.tp.all_reduce(linear(values, self.o_weight).contiguous())
        return summed if self.o_bias is None else summed + self.o_bias

    def pack_weights(self) -> None:
        """Nothing is packed for oneDNN here (LlamaAttention's hook; latent attention's matmuls stay plain)."""


def _weight(rows: int, columns: int) -> nn.Parameter:
    return nn.Parameter(torch.empty(rows, columns), requires_grad=False)


def _zeros(size: int) -> nn.Parameter:
    return nn.Parameter(torch.zeros(size), requires_grad=False)


def _ones(size: int) -> nn.Parameter:
    return nn.Parameter(torch.ones(size), requires_grad=False)
