"""Llama-family decoder over a flattened token batch reading and writing a paged KV cache."""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

import torch
import torch.nn.functional as F
from torch import nn

from executor_svc.attention.backend import AttentionBackend
from executor_svc.attention.metadata import AttentionMetadata
from executor_svc.attention.softcap import soft_cap
from executor_svc.kv_cache import PagedKVCache
from executor_svc.lora.projection import AdapterRows, LoraProjection, with_update
from executor_svc.models.layers import layer_norm, linear, pack_for_cpu_matmul, rms_norm
from executor_svc.models.mla import MlaAttention
from executor_svc.models.moe import SparseMoeBlock
from executor_svc.models.rope import apply_rotary, apply_rotary_interleaved, rope_frequencies
from executor_svc.models.variants import ModelVariant, head_dim_of, norm_eps_of, variant_for
from executor_svc.models.xielu import XIELU_PARAMETERS, xielu
from executor_svc.parallel.tensor_parallel import SINGLE, TensorParallel, vocab_parallel_embedding

if TYPE_CHECKING:
    from transformers import PretrainedConfig


def _packed(module: nn.Module, names: tuple[str, ...]) -> dict[str, torch.Tensor]:
    """The packable ones of ``module``'s named weights, packed (none off the CPU or outside float32)."""
    packed = {name: pack_for_cpu_matmul(getattr(module, name)) for name in names}
    return {name: weight for name, weight in packed.items() if weight is not None}


class LlamaAttention(nn.Module):
    """Self-attention with a fused qkv projection, RoPE (maybe partial), optional q/k RMSNorm (Qwen3), GQA and an
    optional sliding window.

    Under tensor parallelism each rank holds its share of the query and KV heads (column-parallel qkv)
    and its columns of o_proj (row-parallel: the partial outputs are summed over ranks)."""

    def __init__(
        self,
        config: PretrainedConfig,
        attention_backend: AttentionBackend,
        tp: TensorParallel = SINGLE,
        variant: ModelVariant | None = None,
        sliding_window: int | None = None,
        rotary: bool = True,
        attention_chunk: int | None = None,
    ) -> None:
        """``rotary``: q and k are rotated by their positions (False: a NoPE layer, SmolLM3's); ``attention_chunk``:
        queries see only the keys of their own chunk-aligned span of positions (Llama 4's chunked layers)."""
        super().__init__()
        variant = variant or variant_for(config)
        self.tp = tp
        self.rotate = None if not rotary else apply_rotary_interleaved if variant.rotary_interleaved else apply_rotary
        """How q and k turn by their positions (None: not at all, a NoPE layer)."""
        # Split by KV-head groups, unevenly if need be (SmolLM2-135M has 3 KV heads): each rank keeps whole groups.
        kv_start, kv_end = tp.split(config.num_key_value_heads, "num_key_value_heads")
        group = config.num_attention_heads // config.num_key_value_heads
        self.num_kv_heads = kv_end - kv_start
        self.num_heads = self.num_kv_heads * group
        self.kv_head_offset, self.head_offset = kv_start, kv_start * group
        """The first KV head and query head of the checkpoint that this rank holds."""
        self.head_dim = head_dim_of(config)
        self.scale = variant.attention_scale
        self.sliding_window = sliding_window
        """Keys older than this many positions are not attended (None: the whole context)."""
        self.chunk_option = {} if attention_chunk is None else {"attention_chunk": attention_chunk}
        """The backend's keyword for this layer's chunks (none without: backends need not know of chunks)."""
        self.logit_softcap = variant.attention_softcap
        self.eps = norm_eps_of(config)
        self.backend = attention_backend
        qkv_rows = (self.num_heads + 2 * self.num_kv_heads) * self.head_dim
        qkv_bias = variant.qkv_bias
        self.qkv_weight = nn.Parameter(torch.empty(qkv_rows, config.hidden_size), requires_grad=False)
        self.qkv_bias = nn.Parameter(torch.zeros(qkv_rows), requires_grad=False) if qkv_bias else None
        self.o_weight = nn.Parameter(
            torch.empty(config.hidden_size, self.num_heads * self.head_dim), requires_grad=False
        )
        self.o_bias = nn.Parameter(torch.zeros(config.hidden_size), requires_grad=False) if variant.o_bias else None
        self.sinks = (
            nn.Parameter(torch.zeros(self.num_heads), requires_grad=False) if variant.attention_sinks else None
        )
        """Each of this rank's heads' sink logit (GPT-OSS; None: no sinks)."""
        qk_heads = self.num_heads + self.num_kv_heads
        # One weight row per q and k head, whatever the norm (ModelVariant.qk_norm): every row the same checkpoint
        # row for per-head norms, each head its own for Cohere's, the checkpoint's full-width row cut into heads for
        # OLMo's.
        # Llama 4's weightless L2 norm applies to its RoPE layers only.
        self.qk_norm = None if variant.qk_norm == "l2" and not rotary else variant.qk_norm
        self.qk_norm_after_rope = variant.qk_norm_after_rope
        self.qk_norm_weight = (
            nn.Parameter(torch.ones(qk_heads, self.head_dim), requires_grad=False)
            if self.qk_norm not in (None, "l2")
            else None
        )
        self.full_widths = (config.num_attention_heads * self.head_dim, config.num_key_value_heads * self.head_dim)
        """The checkpoint's q and k widths: what a full-width norm divides its sums of squares by."""
        self.packed: dict[str, torch.Tensor] = {}
        """pack_weights' copies of the projections (plain attributes: not moved, cast or saved with the module)."""
        self.qkv_lora: LoraProjection | None = None
        self.o_lora: LoraProjection | None = None
        """The served LoRA adapters of the two projections (executor_svc/lora/stacking.py; None: none adapts it)."""

    def pack_weights(self) -> None:
        """Keep oneDNN-packed copies of the projections for CPU float32 matmuls of 3+ rows (see layers.py)."""
        self.packed = _packed(self, ("qkv_weight", "o_weight"))

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        kv_layer: torch.Tensor,
        meta: AttentionMetadata,
        adapters: AdapterRows | None = None,
        query_scale: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """x [T, hidden] -> attention output projected back to [T, hidden] (``adapters``: the LoRA adapter of
        each row, None when no row uses one; ``query_scale`` [T, 1, 1]: multiplies the queries, the query temperature
        of Llama 4's NoPE layers and of every Ministral 3 layer)."""
        q, k, v = self.project_qkv(x, cos, sin, adapters)
        if query_scale is not None:
            q = (q * query_scale).to(q.dtype)
        out = self.backend.forward(q, k, v, kv_layer, meta, self.scale, sliding_window=self.sliding_window,
                                   logit_softcap=self.logit_softcap, sinks=self.sinks, **self.chunk_option)
        return self.project_out(out, adapters)

    def project_qkv(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, adapters: AdapterRows | None = None
                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x [T, hidden] -> q [T, H, D], k and v [T, KVH, D], with q/k normed (Qwen3) and rotated."""
        tokens = x.shape[0]
        qk_heads = self.num_heads + self.num_kv_heads
        qkv = with_update(linear(x, self.qkv_weight, self.qkv_bias, self.packed.get("qkv_weight")), self.qkv_lora, x,
                          adapters)
        qk = qkv[:, : qk_heads * self.head_dim].reshape(tokens, qk_heads, self.head_dim)
        v = qkv[:, qk_heads * self.head_dim :].reshape(tokens, self.num_kv_heads, self.head_dim)
        if self.qk_norm is not None and not self.qk_norm_after_rope:
            qk = self._norm_qk(qk, self.qk_norm_weight)
        if self.rotate is not None:
            qk = self.rotate(qk, cos, sin)
        if self.qk_norm is not None and self.qk_norm_after_rope:
            qk = self._norm_qk(qk, self.qk_norm_weight)
        return qk[:, : self.num_heads], qk[:, self.num_heads :], v

    def _norm_qk(self, qk: torch.Tensor, weight: torch.Tensor | None) -> torch.Tensor:
        """q and k [T, H + KVH, D] normed as the variant norms them (ModelVariant.qk_norm)."""
        if self.qk_norm == "l2" or weight is None:  # Llama 4's weightless norm, in float32 as HF computes it
            return F.rms_norm(qk.float(), (self.head_dim,), eps=self.eps).to(qk.dtype)
        if self.qk_norm == "head":
            return F.rms_norm(qk, (self.head_dim,), eps=self.eps) * weight
        if self.qk_norm == "head_layer_norm":
            return F.layer_norm(qk, (self.head_dim,), eps=self.eps) * weight
        return self._full_width_qk_norm(qk, weight)

    def _full_width_qk_norm(self, qk: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """q's heads normed as one vector and k's as another, [T, H + KVH, D] (OLMo: RMSNorm over
        num_heads * head_dim). Under tensor parallelism a rank holds some heads: the sums of squares are summed over
        the ranks first. Computed in float32 and scaled before the cast back, as HF's OLMo norm does."""
        dtype = qk.dtype
        parts = qk.float().split([self.num_heads, self.num_kv_heads], dim=1)
        squares = torch.stack([part.pow(2).sum(dim=(1, 2)) for part in parts], dim=1)  # [T, 2]: q's, k's
        if self.tp.enabled:
            squares = self.tp.all_reduce(squares)
        # Python floats, not a tensor made here: nothing is copied from the host inside a captured step.
        normed = [part * torch.rsqrt(squares[:, i] / float(width) + self.eps).view(-1, 1, 1)
                  for i, (part, width) in enumerate(zip(parts, self.full_widths))]
        return (weight.float() * torch.cat(normed, dim=1)).to(dtype)

    def project_out(self, out: torch.Tensor, adapters: AdapterRows | None = None) -> torch.Tensor:
        """Attention output [T, H, D] -> [T, hidden] (summed over ranks under tensor parallelism)."""
        out = out.reshape(out.shape[0], self.num_heads * self.head_dim)
        if not self.tp.enabled:
            projected = linear(out, self.o_weight, self.o_bias, self.packed.get("o_weight"))
            return with_update(projected, self.o_lora, out, adapters)
        # Row-parallel: each rank's partial update is summed with its partial output.
        partial = with_update(linear(out, self.o_weight, packed=self.packed.get("o_weight")), self.o_lora, out,
                              adapters)
        summed = self.tp.all_reduce(partial.contiguous())
        return summed if self.o_bias is None else summed + self.o_bias


class LlamaMLP(nn.Module):
    """Gated feed-forward, act(gate) * up, with a fused gate/up projection (column-parallel under tensor
    parallelism, the down projection row-parallel); SiLU for most of the family, tanh-GELU for Gemma."""

    def __init__(self, config: PretrainedConfig, tp: TensorParallel = SINGLE, variant: ModelVariant | None = None,
                 intermediate_size: int | None = None) -> None:
        """``intermediate_size``: the gate/up rows (None: config.intermediate_size; a MoE's shared expert has its
        own)."""
        super().__init__()
        variant = variant or variant_for(config)
        self.tp = tp
        self.xielu_parameters = (
            nn.Parameter(torch.zeros(len(XIELU_PARAMETERS)), requires_grad=False) if variant.hidden_act == "xielu"
            else None
        )
        """Apertus's learned xIELU coefficients (models/xielu.py); None: another activation."""
        self.act = variant.activation() if self.xielu_parameters is None else self._xielu
        self.gated = variant.mlp_gated
        self.full_intermediate_size = config.intermediate_size if intermediate_size is None else intermediate_size
        """The checkpoint's gate/up rows (all ranks' together)."""
        start, end = tp.split(self.full_intermediate_size, "intermediate_size")  # summed over ranks: may be uneven
        self.intermediate_size = end - start
        self.intermediate_offset = start
        """The first row of the checkpoint's gate/up (column of its down) projection that this rank holds."""
        rows = (2 if self.gated else 1) * self.intermediate_size  # without a gate: the up projection alone
        self.gate_up_weight = nn.Parameter(torch.empty(rows, config.hidden_size), requires_grad=False)
        self.down_weight = nn.Parameter(
            torch.empty(config.hidden_size, self.intermediate_size), requires_grad=False
        )
        bias = variant.mlp_bias
        self.gate_up_bias = nn.Parameter(torch.zeros(rows), requires_grad=False) if bias else None
        self.down_bias = nn.Parameter(torch.zeros(config.hidden_size), requires_grad=False) if bias else None
        """Added once, after the sum over tensor-parallel ranks."""
        self.packed: dict[str, torch.Tensor] = {}
        """pack_weights' copies of the projections (plain attributes: not moved, cast or saved with the module)."""
        self.gate_up_lora: LoraProjection | None = None
        self.down_lora: LoraProjection | None = None
        """The served LoRA adapters of the two projections (executor_svc/lora/stacking.py; None: none adapts it)."""

    def pack_weights(self) -> None:
        """Keep oneDNN-packed copies of the projections for CPU float32 matmuls of 3+ rows (see layers.py)."""
        self.packed = _packed(self, ("gate_up_weight", "down_weight"))

    def _xielu(self, x: torch.Tensor) -> torch.Tensor:
        return xielu(x, cast(torch.Tensor, self.xielu_parameters))

    def forward(self, x: torch.Tensor, adapters: AdapterRows | None = None, graph_safe: bool = False
                ) -> torch.Tensor:
        """x [T, hidden] -> [T, hidden] (``adapters``: as LlamaAttention.forward's; ``graph_safe``: ignored, this
        MLP never reads the host)."""
        out = self.partial_output(x, adapters)
        out = self.tp.all_reduce(out.contiguous()) if self.tp.enabled else out
        return out if self.down_bias is None else out + self.down_bias

    def partial_output(self, x: torch.Tensor, adapters: AdapterRows | None = None) -> torch.Tensor:
        """forward's output before the sum over tensor-parallel ranks (this rank's rows' share of it) and before the
        down projection's bias."""
        gate_up = with_update(linear(x, self.gate_up_weight, self.gate_up_bias, self.packed.get("gate_up_weight")),
                              self.gate_up_lora, x, adapters)
        if self.gated:
            activated = self.act(gate_up[:, : self.intermediate_size]) * gate_up[:, self.intermediate_size :]
        else:
            activated = self.act(gate_up)
        # Row-parallel like o_proj: the partial update is summed over ranks with the partial output.
        return with_update(linear(activated, self.down_weight, packed=self.packed.get("down_weight")),
                           self.down_lora, activated, adapters)


class LlamaDecoderLayer(nn.Module):
    """Pre-norm decoder layer: x + s * attn(norm(x)), then x + s * mlp(norm(x)) (s: Granite's residual_multiplier,
    else 1); with sandwich norms (Gemma 2 and 3) the attention and MLP outputs are normed too before they are added;
    OLMo 2 norms only the outputs; Cohere adds attn(norm(x)) and mlp(norm(x)) to x at once, with LayerNorm."""

    def __init__(
        self,
        config: PretrainedConfig,
        attention_backend: AttentionBackend,
        tp: TensorParallel = SINGLE,
        variant: ModelVariant | None = None,
        sliding_window: int | None = None,
        sparse: bool = False,
        rotary: bool = True,
        attention_chunk: int | None = None,
    ) -> None:
        """``sparse``: the MLP is the variant's routed experts (a MoE layer), else a dense gated MLP; ``rotary``:
        False for a layer whose attention uses no positions (SmolLM3's NoPE layers); ``attention_chunk``: Llama 4's
        chunked attention (LlamaAttention)."""
        super().__init__()
        variant = variant or variant_for(config)
        self.eps = norm_eps_of(config)
        self.norm = layer_norm if variant.layer_norm else rms_norm
        self.residual_scale = variant.residual_scale
        self.parallel_residual = variant.parallel_residual
        hidden = config.hidden_size
        pre = variant.pre_norms
        self.input_norm_weight = nn.Parameter(torch.ones(hidden), requires_grad=False) if pre else None
        mlp_norm = pre and not variant.parallel_residual  # a parallel MLP reads the attention's normed input
        self.post_attention_norm_weight = nn.Parameter(torch.ones(hidden), requires_grad=False) if mlp_norm else None
        """The norm of the MLP's input (HF Llama's post_attention_layernorm; Gemma 3's pre_feedforward_layernorm;
        None with OLMo 2's output-only norms or a parallel residual)."""
        biased = variant.norm_bias
        self.input_norm_bias = nn.Parameter(torch.zeros(hidden), requires_grad=False) if pre and biased else None
        self.post_attention_norm_bias = (
            nn.Parameter(torch.zeros(hidden), requires_grad=False) if mlp_norm and biased else None
        )
        """The LayerNorms' biases (Phi-2, StarCoder2; None elsewhere)."""
        sandwich = variant.sandwich_norms
        self.attention_out_norm_weight = nn.Parameter(torch.ones(hidden), requires_grad=False) if sandwich else None
        self.mlp_out_norm_weight = nn.Parameter(torch.ones(hidden), requires_grad=False) if sandwich else None
        self.attn: LlamaAttention | MlaAttention = (
            MlaAttention(config, variant.mla, attention_backend, tp, sliding_window) if variant.mla is not None
            else LlamaAttention(config, attention_backend, tp, variant, sliding_window, rotary, attention_chunk)
        )
        dense_size = variant.moe.dense_intermediate_size if variant.moe else None
        self.mlp: LlamaMLP | SparseMoeBlock = (
            _sparse_mlp(config, tp, variant) if sparse else LlamaMLP(config, tp, variant, intermediate_size=dense_size)
        )

    def forward(
        self,
        hidden: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        kv_layer: torch.Tensor,
        meta: AttentionMetadata,
        adapters: AdapterRows | None = None,
        query_scale: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """hidden [T, hidden] -> [T, hidden] (``query_scale``: see LlamaAttention.forward)."""
        normed = self.attention_input(hidden)
        if query_scale is None:
            attended = self.attn(normed, cos, sin, kv_layer, meta, adapters)
        else:
            attended = self.attn(normed, cos, sin, kv_layer, meta, adapters, query_scale)
        return self.add_branches(hidden, normed, attended, adapters, graph_safe=meta.is_static)

    def attention_input(self, hidden: torch.Tensor) -> torch.Tensor:
        """What the attention reads from the residual stream: its norm (none with OLMo 2's output-only norms)."""
        if self.input_norm_weight is None:
            return hidden
        if self.input_norm_bias is None:
            return self.norm(hidden, self.input_norm_weight, self.eps)
        return layer_norm(hidden, self.input_norm_weight, self.eps, self.input_norm_bias)

    def add_branches(self, hidden: torch.Tensor, normed: torch.Tensor, attended: torch.Tensor,
                     adapters: AdapterRows | None = None, graph_safe: bool = False) -> torch.Tensor:
        """The layer's output from its input ``hidden``, the attention's input ``normed`` and output ``attended``:
        the attention joins the residual stream, then the MLP of the result does; with a parallel residual
        (Cohere) the MLP reads ``normed`` and both join at once."""
        if self.parallel_residual:
            return hidden + attended + self.mlp(normed, adapters, graph_safe)
        hidden = self.join_attention(hidden, attended)
        return hidden + self.mlp_branch(hidden, adapters, graph_safe)

    def join_attention(self, hidden: torch.Tensor, attended: torch.Tensor) -> torch.Tensor:
        """The residual stream after the attention output ``attended`` joins it."""
        if self.attention_out_norm_weight is not None:
            attended = self.norm(attended, self.attention_out_norm_weight, self.eps)
        return hidden + self.scale_residual(attended)

    def mlp_branch(self, hidden: torch.Tensor, adapters: AdapterRows | None = None, graph_safe: bool = False
                   ) -> torch.Tensor:
        """What the MLP adds to the residual stream ``hidden`` (``graph_safe``: a captured step's forward, in which
        routed experts must not read the host)."""
        norm, bias = self.post_attention_norm_weight, self.post_attention_norm_bias
        if norm is not None:
            hidden = self.norm(hidden, norm, self.eps) if bias is None else layer_norm(hidden, norm, self.eps, bias)
        out = self.mlp(hidden, adapters, graph_safe)
        if self.mlp_out_norm_weight is not None:
            out = self.norm(out, self.mlp_out_norm_weight, self.eps)
        return self.scale_residual(out)

    def scale_residual(self, out: torch.Tensor) -> torch.Tensor:
        """An attention or MLP output as it joins the residual stream (times Granite's residual_multiplier)."""
        return out if self.residual_scale == 1.0 else out * self.residual_scale


def _sparse_mlp(config: PretrainedConfig, tp: TensorParallel, variant: ModelVariant) -> SparseMoeBlock:
    """The routed experts of a MoE layer (with its shared expert where the variant has one)."""
    if variant.moe is None:
        raise ValueError("sparse layer requested for a model without experts")
    size = variant.moe.shared_expert_intermediate_size
    shared = LlamaMLP(config, tp, variant, intermediate_size=size) if size else None
    return SparseMoeBlock(config.hidden_size, variant.moe, variant.activation(), shared, tp)


class LlamaModelForCausalLM(nn.Module):
    """Llama-family decoder over a flattened token batch, for every architecture registry.py serves (Llama, Qwen,
    Mistral, Phi, Gemma, Granite, OLMo, GLM, Cohere, StarCoder2, SmolLM and their MoE kin, whose routed experts
    take the dense MLP's place: moe.py); what each changes is its ModelVariant (variants.py)."""

    def __init__(
        self,
        config: PretrainedConfig,
        attention_backend: AttentionBackend,
        max_model_len: int | None = None,
        tp: TensorParallel = SINGLE,
    ) -> None:
        super().__init__()
        self.variant = variant_for(config)
        self.config = config
        self.tp = tp
        self.eps = norm_eps_of(config)
        self.tie_word_embeddings = bool(getattr(config, "tie_word_embeddings", False))
        start, end = tp.shard(config.vocab_size, "vocab_size")  # vocab-parallel: gathered logits need equal slices
        self.vocab_offset = start
        """The first vocabulary row of the embedding and LM head that this rank holds."""
        self.embed_weight = nn.Parameter(torch.empty(end - start, config.hidden_size), requires_grad=False)
        windows = self.variant.layer_windows
        sparse_layers = self.variant.moe.sparse_layers if self.variant.moe else (False,) * len(windows)
        chunks = self.variant.layer_chunks or (None,) * len(windows)
        self.layers = nn.ModuleList(
            [LlamaDecoderLayer(config, attention_backend, tp, self.variant, window, sparse, rotary, chunk)
             for window, sparse, rotary, chunk in zip(windows, sparse_layers, self.variant.rope_layers, chunks)]
        )
        temperature = self.variant.query_temperature
        self.tempered_layers = tuple(temperature is not None and (temperature.every_layer or not rotary)
                                     for rotary in self.variant.rope_layers)
        """Layers whose queries take Llama 4's position-dependent temperature (its NoPE layers, when tuned)."""
        self.norm_weight = nn.Parameter(torch.ones(config.hidden_size), requires_grad=False)
        self.norm_bias = (
            nn.Parameter(torch.zeros(config.hidden_size), requires_grad=False) if self.variant.norm_bias else None
        )
        self.lm_head_bias = (
            nn.Parameter(torch.zeros(end - start), requires_grad=False) if self.variant.lm_head_bias else None
        )
        """Phi-2's LM head bias (this rank's vocabulary rows)."""
        # Tied models hold one tensor: a second attribute would be untied by to()/to_empty().
        self.untied_lm_head_weight = (
            None
            if self.tie_word_embeddings
            else nn.Parameter(torch.empty(end - start, config.hidden_size), requires_grad=False)
        )
        self.max_positions = max_model_len or config.max_position_embeddings
        # Non-persistent buffers, cast and moved with the module (HF also casts its fp32 cos/sin to the model dtype).
        self.rope_cos: torch.Tensor
        self.rope_sin: torch.Tensor
        self.register_buffer("rope_cos", torch.empty(0), persistent=False)
        self.register_buffer("rope_sin", torch.empty(0), persistent=False)
        # The tables of layers with their own (sliding_attention) RoPE settings (Gemma 3); None: no such layer.
        self.local_rope_cos: torch.Tensor | None
        self.local_rope_sin: torch.Tensor | None
        local = torch.empty(0) if any(self.variant.local_rope_layers) else None
        self.register_buffer("local_rope_cos", local, persistent=False)
        self.register_buffer("local_rope_sin", local, persistent=False)
        self.reset_rope_tables()
        self.packed_lm_head: torch.Tensor | None = None
        """pack_cpu_weights' copy of the LM head (a plain attribute, like the layers' ``packed``)."""
        self.lora_num_slots = 0
        """LoRA adapter slots the layers' stacked projections hold (executor_svc/lora/stacking.py; 0: none)."""
        self.lora_rank = 0
        """The rank each slot is padded to."""

    def pack_cpu_weights(self) -> None:
        """Pack every projection and the LM head for CPU float32 matmuls of 3+ rows (layers.py); once the
        weights are loaded, as the packs are copies. A no-op on other devices and dtypes."""
        for module in self.modules():
            if isinstance(module, (LlamaAttention, LlamaMLP, SparseMoeBlock)):
                module.pack_weights()
        self.packed_lm_head = pack_for_cpu_matmul(self.lm_head_weight)

    @property
    def lm_head_weight(self) -> torch.Tensor:
        """[vocab, hidden] output projection (the embedding matrix when tie_word_embeddings); this rank's
        vocabulary rows under tensor parallelism."""
        return self.embed_weight if self.untied_lm_head_weight is None else self.untied_lm_head_weight

    def reset_rope_tables(self) -> None:
        """(Re)compute the RoPE cos/sin tables [max_positions, rotary_dim / 2] in fp32 (scaled by the RoPE type's
        attention factor, as HF does), then cast them to the dtype and device the tables already have (call
        after to_empty())."""
        dtype, device = self.rope_cos.dtype, self.rope_cos.device
        self.rope_cos, self.rope_sin = self._rope_table(None, dtype, device)
        if self.local_rope_cos is not None:
            self.local_rope_cos, self.local_rope_sin = self._rope_table("sliding_attention", dtype, device)

    def _rope_table(self, layer_type: str | None, dtype: torch.dtype, device: torch.device
                    ) -> tuple[torch.Tensor, torch.Tensor]:
        with torch.device("cpu"):  # also when constructed under `with torch.device("meta")`
            inv_freq, attention_factor = rope_frequencies(self.config, self.variant.rotary_dim, layer_type)
            angles = torch.arange(self.max_positions, dtype=torch.float32).unsqueeze(1) * inv_freq.unsqueeze(0)
            cos, sin = angles.cos(), angles.sin()
            if attention_factor != 1.0:
                cos, sin = cos * attention_factor, sin * attention_factor
        return cos.to(dtype=dtype, device=device), sin.to(dtype=dtype, device=device)

    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        meta: AttentionMetadata,
        kv_cache: PagedKVCache,
        adapters: AdapterRows | None = None,
    ) -> torch.Tensor:
        """input_ids, positions int64 [T] -> final-normed hidden states [T, hidden] (``adapters``: the LoRA adapter
        of each row, from adapter_rows; None when no row uses one)."""
        rotations = [(self.rope_cos[positions].unsqueeze(1), self.rope_sin[positions].unsqueeze(1))]
        if self.local_rope_cos is not None and self.local_rope_sin is not None:
            rotations.append((self.local_rope_cos[positions].unsqueeze(1), self.local_rope_sin[positions].unsqueeze(1)))
        hidden = self.embed(input_ids)
        query_scale = self._query_scale(positions)
        for layer, kv_layer, local, tempered in zip(self.layers, kv_cache.layers, self.variant.local_rope_layers,
                                                    self.tempered_layers):
            cos, sin = rotations[1 if local else 0]
            hidden = layer(hidden, cos, sin, kv_layer, meta, adapters, query_scale if tempered else None)
        if self.variant.layer_norm:
            return layer_norm(hidden, self.norm_weight, self.eps, self.norm_bias)
        return rms_norm(hidden, self.norm_weight, self.eps)

    def _query_scale(self, positions: torch.Tensor) -> torch.Tensor | None:
        """The query temperature per token [T, 1, 1] in float32 (Llama 4, Ministral 3; None: the model has none)."""
        temperature = self.variant.query_temperature
        if temperature is None:
            return None
        steps = torch.floor((positions.float() + temperature.position_offset) / temperature.floor_scale)
        return (torch.log1p(steps) * temperature.attn_scale + 1.0).view(-1, 1, 1)

    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        """int64 [T] -> the decoder's input [T, hidden]: the embeddings, scaled where the architecture scales
        them (Gemma, Granite)."""
        embeds = vocab_parallel_embedding(input_ids, self.embed_weight, self.tp)
        scale = self.variant.embedding_scale
        if scale == 1.0:
            return embeds
        # Gemma multiplies by its scale rounded to the weights' dtype; so does this (a Python float: no tensor
        # is made inside a captured step).
        return embeds * float(torch.tensor(scale, dtype=embeds.dtype))

    def adapter_rows(self, token_slots: torch.Tensor) -> AdapterRows:
        """The forward argument for rows using the adapters of ``token_slots`` (int64 [T] on the model's device,
        -1 where a row uses none)."""
        return AdapterRows(token_slots, self.lora_num_slots, self.lora_rank, self.embed_weight.dtype)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden [N, hidden] -> float32 logits [N, vocab] (gathered from every rank's vocabulary slice)."""
        logits = self.tp.all_gather_columns(linear(hidden, self.lm_head_weight, self.lm_head_bias,
                                                   self.packed_lm_head))
        divisor, softcap = self.variant.logits_divisor, self.variant.logits_softcap
        if divisor != 1.0:
            logits = logits / divisor
        if softcap is not None:
            logits = soft_cap(logits, softcap)
        return logits.float()
