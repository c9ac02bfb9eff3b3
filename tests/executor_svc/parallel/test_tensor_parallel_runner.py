"""Tensor parallelism over two gloo ranks on the CPU: a sharded model runner gives the tokens of the unsharded
one (logprobs within float tolerance: the row-parallel sums are split over ranks), for greedy, seeded and
min-p sampling over steps that add, decode and finish requests, with KV-head groups split evenly or not;
what cannot be split is named."""

from __future__ import annotations

import pytest
import torch
from gloo_ranks import results_on_ranks
from step_plans import BATCHES, outputs_of, plan_steps, requests_plain
from tiny_models import (
    make_tiny_apertus,
    make_tiny_cohere,
    make_tiny_deepseek_v3,
    make_tiny_ernie4_5_moe,
    make_tiny_glm4,
    make_tiny_gpt_oss,
    make_tiny_granite_moe,
    make_tiny_hunyuan_moe,
    make_tiny_llama,
    make_tiny_llama4,
    make_tiny_minimax_m2,
    make_tiny_mistral4,
    make_tiny_olmo2,
    make_tiny_phi2,
    make_tiny_phi3,
    make_tiny_qwen2_moe,
    make_tiny_qwen3,
)

from executor_svc.config import ExecutorConfig
from executor_svc.parallel.tensor_parallel import TensorParallel
from executor_svc.server import build_runner

MAKERS = {
    # plain Llama: llama_3_kv_heads below; q/k/v biases sliced: phi2, deepseek_v3_biased
    "qwen3": make_tiny_qwen3,
    "phi3": make_tiny_phi3,  # fused checkpoint tensors split, then sliced per rank
    # every expert's and the shared expert's intermediate rows split (48 and 80 over 2), the router replicated
    "qwen2_moe": make_tiny_qwen2_moe,
    # stacked gate/up tensors (experts' and the shared MLP's): one slice of each half per rank
    "granite_moe_shared": make_tiny_granite_moe,
    # q and k normed over all heads: each rank's sums of squares summed over the ranks
    "olmo2": make_tiny_olmo2,
    "glm4": make_tiny_glm4,  # a fused gate_up_proj split, then sliced; interleaved RoPE per head
    # attention and MLP branches summed over the ranks apart, then both added; each rank's heads' q/k norm rows
    "cohere_qk_norm": lambda path, seed: make_tiny_cohere(path, seed, use_qk_norm=True),
    # biases of row-parallel projections added once, after the sum; the LM head's bias sliced with its rows
    "phi2": make_tiny_phi2,
    # latent attention: query heads (q_b_proj / q_proj, kv_b_proj rows, o_proj columns) split, the latent cached
    # whole on each rank; V3's grouped sigmoid routing, biased latent projections and o_proj
    "deepseek_v3_biased": lambda path, seed: make_tiny_deepseek_v3(path, seed, attention_bias=True),
    # the biased shared expert's down bias added once, after the sum over ranks
    "ernie4_5_moe": make_tiny_ernie4_5_moe,
    # each rank's heads' sinks; the experts' gate/up biases sliced with their rows, the down biases added by rank 0
    "gpt_oss": make_tiny_gpt_oss,
    # chunked attention on each rank's heads; input-weighted experts, the shared expert and intermediate_size_mlp's
    # dense MLPs split
    "llama4": make_tiny_llama4,
    # latent attention with the query temperature and softmax routing within groups
    "mistral4": make_tiny_mistral4,
    # q and k normed over all heads with half-rotated heads; sigmoid routing with a correction bias
    "minimax_m2": make_tiny_minimax_m2,
    # the shared MLP's rows split beside the experts'; the float32 router replicated
    "hunyuan_moe": make_tiny_hunyuan_moe,
    # the xIELU coefficients replicated, the ungated MLP's rows split
    "apertus": make_tiny_apertus,
    # 3 KV heads over 2 ranks: groups split unevenly (2 + 1), as for the default model's 9 heads / 3 KV heads
    "llama_3_kv_heads": lambda path, seed: make_tiny_llama(path, seed, hidden_size=96, num_attention_heads=6,
                                                           num_key_value_heads=3),
}


def _run_planned_steps(tp: TensorParallel, model_dir: str) -> list[list[tuple]]:
    runner, _ = build_runner(ExecutorConfig(model_dir=model_dir, num_kv_blocks=40), tp=tp)
    return [outputs_of(runner.execute(step)) for step in plan_steps(requests_plain(), BATCHES)]


def _run_every_family(tp: TensorParallel, model_dirs: dict[str, str]) -> dict[str, list[list[tuple]]]:
    return {family: _run_planned_steps(tp, model_dir) for family, model_dir in model_dirs.items()}


@pytest.fixture(scope="module")
def sharded_runs(tmp_path_factory) -> tuple[dict[str, str], list[dict[str, list[list[tuple]]]]]:
    """Every family's checkpoint and the outputs of each of two ranks running it. One pair of rank processes runs
    all the families in turn: starting a pair per family took most of this module's time."""
    root = tmp_path_factory.mktemp("families")
    model_dirs = {family: str(make(root / family, seed=5)) for family, make in MAKERS.items()}
    return model_dirs, results_on_ranks(_run_every_family, (model_dirs,), root)


def _assert_close(sharded: list[list[tuple]], single: list[list[tuple]]) -> None:
    assert len(sharded) == len(single)
    for step_sharded, step_single in zip(sharded, single):
        assert [(o[0], o[1], o[3]) for o in step_sharded] == [(o[0], o[1], o[3]) for o in step_single]
        for ours, reference in zip(step_sharded, step_single):
            assert ours[2] == pytest.approx(reference[2], abs=1e-4)


@pytest.mark.parametrize("family", sorted(MAKERS))
def test_two_ranks_give_the_tokens_of_one(family, sharded_runs):
    model_dirs, per_rank = sharded_runs
    runner, _ = build_runner(ExecutorConfig(model_dir=model_dirs[family], num_kv_blocks=40))
    single = [outputs_of(runner.execute(step)) for step in plan_steps(requests_plain(), BATCHES)]
    assert per_rank[0][family] == per_rank[1][family]  # every rank samples the same tokens with the same logprobs
    _assert_close(per_rank[0][family], single)


def test_shards_that_do_not_split_evenly_are_named(tmp_path):
    from executor_svc.attention.torch_backend import TorchAttentionBackend
    from executor_svc.model_loader import load_model

    model_dir = make_tiny_llama(tmp_path / "odd", num_key_value_heads=1, num_attention_heads=4)
    with pytest.raises(ValueError, match="num_key_value_heads: 1 cannot be split over tensor_parallel_size 2"):
        load_model(model_dir, torch.float32, "cpu", TorchAttentionBackend(64), tp=TensorParallel(0, 2))
    with pytest.raises(ValueError, match="load_format"):
        load_model(model_dir, torch.float32, "cpu", TorchAttentionBackend(64), load_format="dummy",
                   tp=TensorParallel(0, 2))


def test_tensor_parallel_config_is_validated_naming_the_field():
    with pytest.raises(ValueError, match="tensor_parallel_size"):
        ExecutorConfig(model_dir="m", tensor_parallel_size=0)
    with pytest.raises(ValueError, match="defer_token_readback"):
        ExecutorConfig(model_dir="m", tensor_parallel_size=2, defer_token_readback=True)
    assert not ExecutorConfig(model_dir="m", device="cuda", tensor_parallel_size=2).defers_token_readback
    with pytest.raises(ValueError, match="rank"):
        TensorParallel(rank=2, world_size=2)
