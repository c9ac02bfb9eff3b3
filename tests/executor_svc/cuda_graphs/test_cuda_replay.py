"""On CUDA: every captured shape replays to the tokens an eager forward of the reference backend gives
(fp32, the default model's shape with random weights), through the backend ``auto`` picks there.
Skipped without CUDA."""

from __future__ import annotations

import pytest
import torch
from tiny_models import make_tiny_llama

from client.bench.model_shapes import write_shape_dir
from executor_svc.attention.selection import build_attention_backend
from executor_svc.attention.torch_backend import TorchAttentionBackend
from executor_svc.cuda_graphs.step_graphs import StepGraphs, cuda_graph_factory
from executor_svc.host_batch import HostBatch
from executor_svc.kv_cache import PagedKVCache
from executor_svc.model_loader import load_model

pytestmark = pytest.mark.gpu

BLOCK_SIZE = 16
MAX_NUM_SEQS = 64
MAX_QUERY_LEN = 4  # decode and verify with K = 3
CONTEXT = 200
NEAR_TIE = 1e-4


@pytest.fixture(scope="module")
def default_shape_dir(tmp_path_factory):
    tokenizer_dir = make_tiny_llama(tmp_path_factory.mktemp("vocab"), vocab_size=49152)
    return write_shape_dir("default", tokenizer_dir, tmp_path_factory.mktemp("default_shape"))


def test_every_captured_shape_replays_to_the_eager_tokens(default_shape_dir):
    device = torch.device("cuda")
    backend = build_attention_backend("auto", device)
    graphed = load_model(default_shape_dir, torch.float32, device, backend, load_format="dummy")
    eager = load_model(default_shape_dir, torch.float32, device, TorchAttentionBackend(), load_format="dummy")
    config = graphed.config
    blocks_per_seq = -(-(CONTEXT + MAX_QUERY_LEN) // BLOCK_SIZE)
    num_blocks = MAX_NUM_SEQS * blocks_per_seq
    layout = (config.num_hidden_layers, num_blocks, BLOCK_SIZE, config.num_key_value_heads, config.head_dim,
              torch.float32, device)
    graph_cache, eager_cache = PagedKVCache(*layout, scratch_blocks=1), PagedKVCache(*layout)
    graphs = StepGraphs(graphed, graph_cache, MAX_NUM_SEQS, MAX_QUERY_LEN, blocks_per_seq, cuda_graph_factory())
    graphs.capture_all()
    for cache in (graph_cache, eager_cache):  # the same random context in both caches
        for layer in cache.layers:
            layer.copy_(torch.randn(layer.shape, generator=torch.Generator(device).manual_seed(0), device=device))
    generator = torch.Generator().manual_seed(1)
    for shape in graphs.shapes:
        batch = HostBatch(BLOCK_SIZE)
        for seq in range(shape.num_seqs):
            context = int(torch.randint(1, CONTEXT - MAX_QUERY_LEN, (1,), generator=generator))
            tokens = torch.randint(0, config.vocab_size, (shape.query_len,), generator=generator).tolist()
            batch.add_sequence(tokens, context, list(range(seq * blocks_per_seq, (seq + 1) * blocks_per_seq)))
        replayed = graphs.run(batch, shape, lambda ids: None).argmax(-1)
        input_ids, positions, meta = batch.to_device(device)
        logits = eager.compute_logits(eager(input_ids, positions, meta, eager_cache))
        # Equal tokens, except where the eager top two are a near-tie (reductions differ at 1e-6).
        gaps = logits.max(-1).values - logits.gather(1, replayed.unsqueeze(1)).squeeze(1)
        assert bool((gaps < NEAR_TIE).all()), f"shape {shape}: largest gap {float(gaps.max()):.3g}"
        assert float((replayed == logits.argmax(-1)).float().mean()) > 0.99, f"shape {shape}"
