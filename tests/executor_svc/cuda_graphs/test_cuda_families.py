"""On CUDA: the model families whose layers differ most from Llama's replay their captured decode and verify steps
(through the backend ``auto`` picks there) to the logits of eager steps of the torch reference backend, fp32.

Routed experts (Mixtral; captured steps run the graph-safe experts), interleaved RoPE and a fused gate/up (GLM-4),
LayerNorm with parallel branches and NoPE layers (Cohere 2), biases and an ungated MLP (Phi-2), q/k norms over all
heads with output-only norms (OLMo 2), latent attention with grouped sigmoid routing (DeepSeek-V3: one cached
latent per token that every query head attends to), attention sinks and biased experts (GPT-OSS), chunked attention,
NoPE layers' query temperature and input-weighted experts (Llama 4). The CPU tests of
the same steps use a stand-in for the graph (test_step_graphs.py); skipped without CUDA."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from tiny_models import (
    make_tiny_cohere2,
    make_tiny_deepseek_v3,
    make_tiny_glm4,
    make_tiny_gpt_oss,
    make_tiny_llama4,
    make_tiny_mixtral,
    make_tiny_olmo2,
    make_tiny_phi2,
)

from executor_svc.attention.backend import AttentionBackend
from executor_svc.attention.torch_backend import TorchAttentionBackend
from executor_svc.cuda_graphs.buckets import GraphShape
from executor_svc.cuda_graphs.step_graphs import GraphCapture, StepGraphs
from executor_svc.host_batch import HostBatch
from executor_svc.model_loader import load_hf_config, load_model
from executor_svc.models.kv_layout import kv_layout
from executor_svc.models.variants import variant_for

pytestmark = pytest.mark.gpu

FAMILIES = {"mixtral": make_tiny_mixtral, "glm4": make_tiny_glm4, "cohere2": make_tiny_cohere2,
            "phi2": make_tiny_phi2, "olmo2": make_tiny_olmo2, "deepseek_v3": make_tiny_deepseek_v3,
            "gpt_oss": make_tiny_gpt_oss, "llama4": make_tiny_llama4}
BLOCK_SIZE = 4
NUM_BLOCKS = 40
BLOCKS_PER_SEQ = 6
VOCAB = 300
STEPS = [({"a": 1, "b": 1, "c": 1}, GraphShape(4, 1)), ({"b": 1}, GraphShape(1, 1)),
         ({"a": 3, "c": 2}, GraphShape(2, 3)), ({"a": 2, "b": 3, "c": 1}, GraphShape(4, 3))]


def replays_against_eager(checkpoint: Path, device: torch.device, backend: AttentionBackend,
                          make_capture: Callable[[], GraphCapture]) -> None:
    """Prefill three sequences in both models, then compare every STEPS step: replayed logits against eager ones."""
    eager = load_model(checkpoint, torch.float32, device, TorchAttentionBackend())
    graphed = load_model(checkpoint, torch.float32, device, backend)
    config = eager.config
    kv = kv_layout(config)
    layout = (config.num_hidden_layers, NUM_BLOCKS, BLOCK_SIZE, torch.float32, device)
    eager_cache, graph_cache = kv.cache(*layout), kv.cache(*layout, scratch_blocks=1)
    graphs = StepGraphs(graphed, graph_cache, 4, 3, BLOCKS_PER_SEQ, make_capture=make_capture)
    graphs.capture_all()
    blocks = torch.randperm(NUM_BLOCKS, generator=torch.Generator().manual_seed(5)).tolist()
    tables = {name: blocks[i * BLOCKS_PER_SEQ : (i + 1) * BLOCKS_PER_SEQ] for i, name in enumerate("abc")}
    lengths = dict.fromkeys(tables, 0)
    rng = torch.Generator().manual_seed(9)

    def batch(work: dict[str, int]) -> HostBatch:
        host = HostBatch(BLOCK_SIZE)
        for name, count in work.items():
            host.add_sequence(torch.randint(0, VOCAB, (count,), generator=rng).tolist(), lengths[name], tables[name])
            lengths[name] += count
        return host

    def eager_logits(host: HostBatch, model: torch.nn.Module, cache: Any) -> torch.Tensor:
        ids, positions, meta = host.to_device(device)
        return model.compute_logits(model(ids, positions, meta, cache))

    with torch.inference_mode():
        prefill = batch({"a": 11, "b": 3, "c": 17})
        eager_logits(prefill, eager, eager_cache)
        eager_logits(prefill, graphed, graph_cache)
        for work, shape in STEPS:
            host = batch(work)
            assert graphs.shape_for(host) == shape
            expected = eager_logits(host, eager, eager_cache)
            got = graphs.run(host, shape, resolve_unread=lambda ids: None)
            torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_families_replay_cuda_graphs_to_eager_logits(family, tmp_path):
    from executor_svc.attention.selection import build_attention_backend
    from executor_svc.cuda_graphs.step_graphs import cuda_graph_factory

    device = torch.device("cuda")
    checkpoint = FAMILIES[family](tmp_path, seed=3, vocab_size=VOCAB)
    config = load_hf_config(checkpoint)  # what auto picks from: torch_padded for sinks, chunks and wide heads
    backend = build_attention_backend("auto", device, kv_layout(config).head_dim, variant_for(config).triton_lacks)
    replays_against_eager(checkpoint, device, backend, cuda_graph_factory())
