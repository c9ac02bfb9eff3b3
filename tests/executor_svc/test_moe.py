"""Routed experts (Mixtral, Qwen2-MoE, Qwen3-MoE, the DeepSeek-style routers): each router picks as its
family's does, the ways to run the experts agree, the graph-safe one reads nothing on the host and compiles as one
graph, and the config's MoE fields are read as HF reads them.

The models themselves are checked against HF transformers in test_llama.py (logits) and, captured, in
cuda_graphs/test_step_graphs.py."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F

from executor_svc.models.moe import SparseMoeBlock
from executor_svc.models.moe_experts import (
    clamped_swiglu,
    dense_experts,
    gathered_experts,
    glu,
    graph_safe_experts,
    grouped_experts,
    grouped_mm_experts,
    grouped_mm_runs_on_device,
)
from executor_svc.models.moe_routing import route
from executor_svc.models.moe_settings import MoeSettings, moe_settings_for

SILU_GLU = glu(F.silu)
HIDDEN, INTERMEDIATE, EXPERTS = 32, 24, 6  # multiples of 8: what a grouped GEMM kernel needs


def _weights(seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    router = torch.randn(EXPERTS, HIDDEN, generator=generator)
    gate_up = torch.randn(EXPERTS, 2 * INTERMEDIATE, HIDDEN, generator=generator) * 0.2
    down = torch.randn(EXPERTS, HIDDEN, INTERMEDIATE, generator=generator) * 0.2
    return router, gate_up, down


def _routing(top_k: int, normalize: bool, **fields) -> MoeSettings:
    """Settings of a softmax router over EXPERTS (or as ``fields`` say)."""
    return MoeSettings(num_experts=EXPERTS, top_k=top_k, expert_intermediate_size=INTERMEDIATE,
                       normalize_top_k=normalize, float32_routing_weights=False, shared_expert_intermediate_size=None,
                       sparse_layers=(True,), **fields)


def _reference(x: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor, gate_up: torch.Tensor,
               down: torch.Tensor) -> torch.Tensor:
    """Token by token, pick by pick: the definition."""
    out = torch.zeros_like(x)
    for t in range(x.shape[0]):
        for k in range(ids.shape[1]):
            gate, up = (gate_up[ids[t, k]] @ x[t]).chunk(2)
            out[t] += weights[t, k] * (down[ids[t, k]] @ (F.silu(gate) * up))
    return out


@pytest.mark.parametrize("tokens", [1, 2, 3, 7, 40])
@pytest.mark.parametrize("top_k", [1, 2, 3])
@pytest.mark.parametrize("float32_weights", [False, True])
def test_grouped_gathered_and_dense_experts_compute_the_same_sums(tokens, top_k, float32_weights):
    router, gate_up, down = _weights(tokens * 10 + top_k)
    x = torch.randn(tokens, HIDDEN, generator=torch.Generator().manual_seed(tokens))
    weights, ids = route(x, router, _routing(top_k, normalize=top_k > 1))
    expected = _reference(x, ids, weights, gate_up, down)
    for run in (grouped_experts, grouped_mm_experts, gathered_experts, dense_experts, graph_safe_experts):
        got = run(x, ids, weights, gate_up, down, SILU_GLU, float32_weights)
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5, msg=lambda m, run=run: f"{run.__name__}: {m}")


def _biased_reference(x, ids, weights, gate_up, down, gate_up_bias, down_bias, alpha, limit):
    """GPT-OSS's experts token by token, written from HF's definition (interleaving aside: gate rows first)."""
    out = torch.zeros_like(x)
    for t in range(x.shape[0]):
        for k in range(ids.shape[1]):
            e = ids[t, k]
            gate, up = (gate_up[e] @ x[t] + gate_up_bias[e]).chunk(2)
            gate, up = gate.clamp(max=limit), up.clamp(-limit, limit)
            out[t] += weights[t, k] * (down[e] @ ((up + 1) * gate * torch.sigmoid(alpha * gate)) + down_bias[e])
    return out


@pytest.mark.parametrize("tokens", [1, 3, 40])
def test_biased_experts_with_the_clamped_activation_agree_on_every_path(tokens):
    router, gate_up, down = _weights(tokens + 100)
    generator = torch.Generator().manual_seed(tokens)
    gate_up = gate_up * 8  # pre-activations well past the clamp limit
    biases = (torch.randn(EXPERTS, 2 * INTERMEDIATE, generator=generator),
              torch.randn(EXPERTS, HIDDEN, generator=generator))
    x = torch.randn(tokens, HIDDEN, generator=generator)
    weights, ids = route(x, router, _routing(2, normalize=True))
    expected = _biased_reference(x, ids, weights, gate_up, down, *biases, alpha=1.702, limit=1.5)
    gated = clamped_swiglu(1.702, 1.5)
    assert (gate_up[ids[0, 0]] @ x[0]).abs().max() > 1.5  # the clamp bites
    for run in (grouped_experts, grouped_mm_experts, gathered_experts, dense_experts, graph_safe_experts):
        got = run(x, ids, weights, gate_up, down, gated, False, biases=biases)
        torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-5, msg=lambda m, run=run: f"{run.__name__}: {m}")


def test_routing_takes_the_top_k_of_the_softmax_and_normalises_them_only_when_asked():
    router = torch.eye(EXPERTS, HIDDEN)
    x = torch.zeros(1, HIDDEN)
    x[0, :EXPERTS] = torch.tensor([0.0, 3.0, 1.0, 2.0, -1.0, 0.5])
    probs = torch.softmax(x[0, :EXPERTS], dim=-1)
    weights, ids = route(x, router, _routing(2, normalize=False))
    assert ids.tolist() == [[1, 3]]
    torch.testing.assert_close(weights[0], probs[[1, 3]])
    normalised, _ = route(x, router, _routing(2, normalize=True))
    torch.testing.assert_close(normalised[0], probs[[1, 3]] / probs[[1, 3]].sum())
    assert weights.dtype == torch.float32


def test_sigmoid_routing_chooses_by_score_plus_bias_within_the_best_groups_and_weighs_by_score():
    """DeepSeek-V3's router on hand-made scores: 6 experts in 3 groups of 2, the best 2 groups kept."""
    router = torch.eye(EXPERTS, HIDDEN)
    x = torch.zeros(1, HIDDEN)
    x[0, :EXPERTS] = torch.tensor([2.0, -1.0, 0.0, 0.1, 1.5, 1.4])  # logits; groups (0, 1), (2, 3), (4, 5)
    scores = torch.sigmoid(x[0, :EXPERTS])
    bias = torch.tensor([0.0, 0.0, 0.0, 3.0, 0.0, 0.0])  # lifts expert 3 (and its group) into the choice
    settings = _routing(2, normalize=False, scoring="sigmoid", score_correction_bias=True, num_groups=3,
                        top_groups=2, groups_score_top_two=True, routed_scaling_factor=2.0, float32_router=True)
    weights, ids = route(x, router, settings, bias)
    # group sums of the two best biased scores: group 1 (3.0 + ...) and group 2 beat group 0
    assert sorted(ids[0].tolist()) == [3, 4]
    torch.testing.assert_close(weights[0].sort().values, (2.0 * scores[[3, 4]]).sort().values)
    # without the bias, expert 0 (best alone) wins a place: groups 0 and 2
    unbiased, unbiased_ids = route(x, router, settings, torch.zeros(EXPERTS))
    assert sorted(unbiased_ids[0].tolist()) == [0, 4]
    normalised, _ = route(x, router, dataclasses.replace(settings, normalize_top_k=True), torch.zeros(EXPERTS))
    torch.testing.assert_close(normalised.sum(), torch.tensor(2.0))


def test_group_limited_softmax_routing_keeps_the_groups_of_the_best_experts():
    """DeepSeek-V2's group_limited_greedy: a group scores its best expert's probability."""
    router = torch.eye(EXPERTS, HIDDEN)
    x = torch.zeros(1, HIDDEN)
    x[0, :EXPERTS] = torch.tensor([3.0, -5.0, 2.9, 2.8, 1.0, 0.0])
    probs = torch.softmax(x[0, :EXPERTS], dim=-1)
    limited = _routing(2, normalize=False, num_groups=3, top_groups=1)
    weights, ids = route(x, router, limited)
    assert sorted(ids[0].tolist()) == [0, 1]  # only group 0 may be chosen, however small expert 1's score
    torch.testing.assert_close(weights[0].sort().values, probs[[0, 1]].sort().values)
    _, free_ids = route(x, router, dataclasses.replace(limited, num_groups=1, top_groups=1))
    assert sorted(free_ids[0].tolist()) == [0, 2]


def test_deepseek_style_settings_are_read_and_refused_by_field():
    from transformers import DeepseekV2Config, DeepseekV3Config, Glm4MoeLiteConfig

    v3 = moe_settings_for(DeepseekV3Config(num_hidden_layers=5, first_k_dense_replace=2, n_routed_experts=16,
                                           num_experts_per_tok=4, n_group=4, topk_group=2, n_shared_experts=2,
                                           moe_intermediate_size=8))
    assert v3 is not None and v3.sparse_layers == (False, False, True, True, True)
    assert (v3.scoring, v3.num_groups, v3.top_groups, v3.shared_expert_intermediate_size) == ("sigmoid", 4, 2, 16)
    assert not v3.shared_expert_gated and v3.score_correction_bias and v3.float32_router
    greedy = moe_settings_for(DeepseekV2Config(num_hidden_layers=2, n_group=2, topk_group=1, topk_method="greedy",
                                               num_experts_per_tok=6))
    assert greedy is not None and (greedy.scoring, greedy.num_groups, greedy.normalize_top_k) == ("softmax", 1, False)
    lite = moe_settings_for(Glm4MoeLiteConfig(num_hidden_layers=3, mlp_layer_types=["dense", "sparse", "dense"]))
    assert lite is not None and lite.sparse_layers == (False, True, False)
    refused = [(DeepseekV2Config(topk_method="noaux_tc", num_experts_per_tok=6), "topk_method"),
               (DeepseekV2Config(), "num_experts_per_tok"),
               (DeepseekV3Config(n_routed_experts=16, n_group=3, topk_group=1), "n_group"),
               (DeepseekV3Config(n_routed_experts=16, num_experts_per_tok=8, n_group=8, topk_group=2), "topk_group"),
               (Glm4MoeLiteConfig(num_hidden_layers=2, mlp_layer_types=["dense", "mixed"]), "mlp_layer_types")]
    for config, field in refused:
        with pytest.raises(ValueError, match=field):
            moe_settings_for(config)


def test_experts_with_no_token_are_skipped_and_get_nothing():
    _, gate_up, down = _weights(5)
    x = torch.randn(4, HIDDEN, generator=torch.Generator().manual_seed(1))
    ids = torch.tensor([[2, 5]] * 4)
    weights = torch.full((4, 2), 0.5)
    expected = _reference(x, ids, weights, gate_up, down)
    gate_up_broken = gate_up.clone()
    gate_up_broken[[0, 1, 3, 4]] = float("nan")  # never picked: must not be touched (dense weighs them by zero)
    torch.testing.assert_close(grouped_experts(x, ids, weights, gate_up_broken, down, SILU_GLU, False), expected)
    torch.testing.assert_close(gathered_experts(x, ids, weights, gate_up_broken, down, SILU_GLU, False), expected)


def test_the_grouped_gemm_path_reads_nothing_on_the_host_and_compiles_as_one_graph():
    """What a Hopper GPU's captured steps run, here on the CPU in bfloat16 (torch's grouped GEMM takes bfloat16 only
    when compiled; dimensions multiples of 8)."""
    from host_syncs import recorded_host_syncs

    generator = torch.Generator().manual_seed(4)
    gate_up = (torch.randn(EXPERTS, 32, 16, generator=generator) * 0.3).bfloat16()
    down = (torch.randn(EXPERTS, 16, 16, generator=generator) * 0.3).bfloat16()
    x = torch.randn(5, 16, generator=generator).bfloat16()
    ids = torch.tensor([[0, 3], [3, 5], [5, 0], [2, 3], [3, 1]])
    weights = torch.rand(5, 2, generator=generator)
    expected = grouped_experts(x, ids, weights, gate_up, down, SILU_GLU, True)
    with recorded_host_syncs() as syncs:
        got = grouped_mm_experts(x, ids, weights, gate_up, down, SILU_GLU, True)
    assert syncs == []
    assert torch.equal(got, expected)
    compiled = torch.compile(grouped_mm_experts, fullgraph=True, dynamic=False)
    torch.testing.assert_close(compiled(x, ids, weights, gate_up, down, SILU_GLU, True), expected, atol=0.05, rtol=0.02)
    assert not grouped_mm_runs_on_device(x, gate_up, down)  # on the CPU the eager steps group on the host instead


def _block(shared: bool) -> SparseMoeBlock:
    from transformers import LlamaConfig

    from executor_svc.models.llama import LlamaMLP

    settings = MoeSettings(EXPERTS, 2, INTERMEDIATE, normalize_top_k=True, float32_routing_weights=False,
                           shared_expert_intermediate_size=16 if shared else None,
                           sparse_layers=(True,))
    config = LlamaConfig(hidden_size=HIDDEN, intermediate_size=64, num_attention_heads=4)
    shared_expert = LlamaMLP(config, intermediate_size=16) if shared else None
    block = SparseMoeBlock(HIDDEN, settings, F.silu, shared_expert)
    generator = torch.Generator().manual_seed(9)
    with torch.no_grad():
        for param in block.parameters():
            param.copy_(torch.randn(param.shape, generator=generator) * 0.3)
    return block


@pytest.mark.parametrize("tokens", [2, 5])
def test_the_graph_safe_block_reads_nothing_on_the_host_and_equals_the_grouped_one(tokens):
    from host_syncs import recorded_host_syncs

    block = _block(shared=True)
    x = torch.randn(tokens, HIDDEN, generator=torch.Generator().manual_seed(tokens))
    with torch.inference_mode():
        expected = block(x)
        with recorded_host_syncs() as syncs:
            got = block(x, graph_safe=True)
        with recorded_host_syncs() as grouped_syncs:
            block(x)
    assert syncs == []
    assert grouped_syncs, "the grouped experts read their sizes on the host (or the recorder misses it)"
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("tokens", [2, 5])  # gathered (4 picks of 6 experts), dense (10 picks)
def test_the_block_compiles_as_one_graph(tokens):
    """torch.compile(fullgraph=True) fails on a graph break: inside a compiled region the block runs the graph-safe
    experts even when not asked to."""
    block = _block(shared=True)
    x = torch.randn(tokens, HIDDEN, generator=torch.Generator().manual_seed(2))
    compiled = torch.compile(block, fullgraph=True, dynamic=False)
    with torch.inference_mode():
        torch.testing.assert_close(compiled(x), block(x), atol=1e-5, rtol=1e-5)


def test_qwen_settings_follow_mlp_only_layers_and_decoder_sparse_step():
    from transformers import Qwen2MoeConfig, Qwen3MoeConfig

    config = Qwen3MoeConfig(num_hidden_layers=6, num_experts=8, num_experts_per_tok=2, decoder_sparse_step=2,
                            mlp_only_layers=[3], norm_topk_prob=True, moe_intermediate_size=32)
    settings = moe_settings_for(config)
    assert settings is not None
    assert settings.sparse_layers == (False, True, False, False, False, True)
    assert (settings.num_experts, settings.top_k, settings.expert_intermediate_size) == (8, 2, 32)
    assert settings.normalize_top_k and settings.shared_expert_intermediate_size is None
    qwen2 = moe_settings_for(Qwen2MoeConfig(num_hidden_layers=2, shared_expert_intermediate_size=48))
    assert qwen2 is not None and qwen2.shared_expert_intermediate_size == 48 and not qwen2.normalize_top_k


def test_stacked_experts_split_per_expert_from_either_layout_and_other_shapes_are_named():
    from transformers import Qwen3MoeConfig

    from executor_svc.models.moe_weights import checkpoint_layout

    config = Qwen3MoeConfig(hidden_size=8, num_hidden_layers=1, num_experts=2, num_experts_per_tok=1,
                            moe_intermediate_size=3)
    settings = moe_settings_for(config)
    assert settings is not None
    gate_up = torch.randn(2, 6, 8)  # transformers' layout: [experts, 2 * intermediate, hidden]
    name = "model.layers.0.mlp.experts.gate_up_proj"
    linear = dict(checkpoint_layout(name, gate_up, config, settings) or [])
    multiplied = dict(checkpoint_layout(name, gate_up.transpose(1, 2), config, settings) or [])
    assert list(linear) == list(multiplied) == [f"model.layers.0.mlp.experts.{e}.{p}_proj.weight"
                                                for e in (0, 1) for p in ("gate", "up")]
    assert all(torch.equal(linear[key], multiplied[key]) for key in linear)
    assert torch.equal(linear["model.layers.0.mlp.experts.1.up_proj.weight"], gate_up[1, 3:])
    with pytest.raises(ValueError, match=r"has shape \(2, 5, 8\), expected \(2, 6, 8\) or, stacked as they "
                                         r"multiply, \(2, 8, 6\)"):
        checkpoint_layout(name, torch.randn(2, 5, 8), config, settings)


def test_hunyuan_settings_take_one_top_k_per_layer_when_every_layer_agrees():
    from transformers import HunYuanMoEV1Config

    config = HunYuanMoEV1Config(num_hidden_layers=2, num_experts=4, moe_topk=[2, 2], intermediate_size=24)
    settings = moe_settings_for(config)
    assert settings is not None
    assert (settings.num_experts, settings.top_k, settings.expert_intermediate_size) == (4, 2, 24)
    assert settings.shared_expert_intermediate_size == 24 and not settings.shared_expert_gated
    assert settings.normalize_top_k and settings.float32_router
    with pytest.raises(ValueError, match=r"moe_topk: one top-k for every layer is served, got \[2, 1\]"):
        moe_settings_for(HunYuanMoEV1Config(num_hidden_layers=2, num_experts=4, moe_topk=[2, 1]))


def test_mixtral_settings_always_normalise_and_weigh_in_float32():
    from transformers import MixtralConfig

    settings = moe_settings_for(MixtralConfig(num_hidden_layers=3, num_local_experts=8, num_experts_per_tok=2,
                                              intermediate_size=40))
    assert settings is not None
    assert settings.normalize_top_k and settings.float32_routing_weights
    assert settings.expert_intermediate_size == 40 and settings.sparse_layers == (True, True, True)


def test_out_of_range_expert_counts_are_refused_naming_the_field():
    from transformers import LlamaConfig, MixtralConfig

    with pytest.raises(ValueError, match="num_experts_per_tok: must be in \\[1, 4\\], got 5"):
        moe_settings_for(MixtralConfig(num_local_experts=4, num_experts_per_tok=5))
    assert moe_settings_for(LlamaConfig()) is None


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("tokens", [1, 4, 64])
def test_a_cuda_graph_of_the_block_replays_to_the_eager_sums(dtype, tokens):
    """On CUDA the graph-safe experts capture into a CUDA graph (grouped GEMM in bfloat16 on Hopper, gathered or
    dense otherwise) and replay new inputs to what the eager, host-grouped experts give."""
    device = torch.device("cuda")
    block = _block(shared=True).to(device=device, dtype=dtype)
    generator = torch.Generator(device).manual_seed(tokens)
    static_x = torch.zeros(tokens, HIDDEN, device=device, dtype=dtype)
    graph = torch.cuda.CUDAGraph()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.inference_mode():
        with torch.cuda.stream(side):
            block(static_x, graph_safe=True)
        torch.cuda.current_stream().wait_stream(side)
        with torch.cuda.graph(graph):
            static_out = block(static_x, graph_safe=True)
        for _ in range(3):
            x = torch.randn(tokens, HIDDEN, device=device, dtype=dtype, generator=generator)
            static_x.copy_(x)
            graph.replay()
            tolerance = 2e-2 if dtype == torch.bfloat16 else 1e-5
            torch.testing.assert_close(static_out, block(x), atol=tolerance, rtol=tolerance)
    if dtype == torch.bfloat16 and torch.cuda.get_device_capability() >= (9, 0):
        assert grouped_mm_runs_on_device(static_x, block.experts_gate_up_weight, block.experts_down_weight)
