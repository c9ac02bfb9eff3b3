"""Captured decode/verify forwards, replayed through a stand-in graph on the CPU, give eager's logits.

The stand-in re-runs the captured function at each replay, reading whatever the function reads: a
forward that kept a reference to a per-step tensor instead of the static buffers would read stale
inputs, as a real CUDA graph would, and these comparisons would fail.
"""

from __future__ import annotations

import pytest
import torch
from tiny_models import (
    make_tiny_cohere2,
    make_tiny_deepseek_v3,
    make_tiny_gemma,
    make_tiny_gemma2,
    make_tiny_gemma3,
    make_tiny_glm4,
    make_tiny_glm4_moe,
    make_tiny_gpt_oss,
    make_tiny_llama,
    make_tiny_llama4,
    make_tiny_minimax_m2,
    make_tiny_mistral,
    make_tiny_mistral4,
    make_tiny_mixtral,
    make_tiny_olmo2,
    make_tiny_olmoe,
    make_tiny_phi2,
    make_tiny_phi3,
    make_tiny_qwen2_moe,
    make_tiny_qwen3_moe,
)

from executor_svc.attention.padded_torch_backend import PaddedTorchAttentionBackend
from executor_svc.attention.torch_backend import TorchAttentionBackend
from executor_svc.cuda_graphs.buckets import GraphShape
from executor_svc.cuda_graphs.step_graphs import EagerStandIn, StepGraphs
from executor_svc.host_batch import HostBatch
from executor_svc.model_loader import load_model
from executor_svc.models.kv_layout import kv_layout

BLOCK_SIZE = 4
NUM_BLOCKS = 40
BLOCKS_PER_SEQ = 6
VOCAB = 300


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return make_tiny_llama(tmp_path_factory.mktemp("graphs"), seed=2, vocab_size=VOCAB)


class Twin:
    """The same weights twice: eager with the reference backend, and captured with a graph-safe one."""

    def __init__(self, checkpoint, max_num_seqs: int = 4, max_query_len: int = 3, pack: bool = True) -> None:
        """``pack``: the CPU's packed weights for 3+ rows (models/layers.py); off, the model runs as on a GPU."""
        cpu = torch.device("cpu")
        self.eager = load_model(checkpoint, torch.float32, cpu, TorchAttentionBackend(), pack_cpu_weights=pack)
        self.graphed = load_model(checkpoint, torch.float32, cpu, PaddedTorchAttentionBackend(), pack_cpu_weights=pack)
        config = self.eager.config
        kv = kv_layout(config)
        layout = (config.num_hidden_layers, NUM_BLOCKS, BLOCK_SIZE, torch.float32, cpu)
        self.eager_cache = kv.cache(*layout)
        self.graph_cache = kv.cache(*layout, scratch_blocks=1)
        self.stand_ins: list[EagerStandIn] = []
        # keep_hidden: the copy an EAGLE-style drafter needs is part of every captured step tested here.
        self.graphs = StepGraphs(self.graphed, self.graph_cache, max_num_seqs, max_query_len, BLOCKS_PER_SEQ,
                                 make_capture=self._stand_in, keep_hidden=True)
        self.graphs.capture_all()
        blocks = torch.randperm(NUM_BLOCKS, generator=torch.Generator().manual_seed(5)).tolist()
        self.tables = {name: blocks[i * BLOCKS_PER_SEQ : (i + 1) * BLOCKS_PER_SEQ] for i, name in enumerate("abcde")}
        self.lengths = dict.fromkeys(self.tables, 0)
        self.rng = torch.Generator().manual_seed(9)

    def _stand_in(self) -> EagerStandIn:
        self.stand_ins.append(EagerStandIn())
        return self.stand_ins[-1]

    def batch(self, work: dict[str, int]) -> HostBatch:
        batch = HostBatch(BLOCK_SIZE)
        for name, count in work.items():
            tokens = torch.randint(0, VOCAB, (count,), generator=self.rng).tolist()
            batch.add_sequence(tokens, self.lengths[name], self.tables[name])
            self.lengths[name] += count
        return batch

    @torch.inference_mode()
    def eager_logits(self, batch: HostBatch, model, cache) -> torch.Tensor:
        ids, positions, meta = batch.to_device(torch.device("cpu"))
        return model.compute_logits(model(ids, positions, meta, cache))

    def prefill(self, work: dict[str, int]) -> None:
        batch = self.batch(work)
        self.eager_logits(batch, self.eager, self.eager_cache)
        self.eager_logits(batch, self.graphed, self.graph_cache)


def test_replayed_decode_and_verify_steps_equal_eager(checkpoint):
    twin = Twin(checkpoint)
    twin.prefill({"a": 9, "b": 3, "c": 14})
    for work, shape in [
        ({"a": 1, "b": 1, "c": 1}, GraphShape(4, 1)),
        ({"a": 3, "c": 2}, GraphShape(2, 3)),  # mixed verify lengths pad to 3
        ({"b": 1}, GraphShape(1, 1)),
        ({"a": 2, "b": 3, "c": 1}, GraphShape(4, 3)),
    ]:
        batch = twin.batch(work)
        assert twin.graphs.shape_for(batch) == shape
        expected = twin.eager_logits(batch, twin.eager, twin.eager_cache)
        with torch.inference_mode():
            got = twin.graphs.run(batch, shape, resolve_unread=lambda ids: None)
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
        assert torch.equal(got.argmax(-1), expected.argmax(-1))
        # The replay's hidden states (what an EAGLE-style drafter reads) are the eager ones of the real rows.
        torch.testing.assert_close(twin.eager.compute_logits(twin.graphs.last_hidden), expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(twin.graph_cache.layers[0][:NUM_BLOCKS], twin.eager_cache.layers[0])
    assert sum(s.replays for s in twin.stand_ins) == 4


def test_capture_writes_no_cache_block(checkpoint):
    twin = Twin(checkpoint)
    for layer in twin.graph_cache.layers:
        assert layer[:NUM_BLOCKS].abs().sum() == 0


def test_unread_tokens_are_resolved_into_the_static_buffer_before_replay(checkpoint):
    twin = Twin(checkpoint)
    twin.prefill({"a": 5, "b": 6})
    batch = twin.batch({"a": 1, "b": 1})
    expected = twin.eager_logits(batch, twin.eager, twin.eager_cache)
    true_ids = list(batch.input_ids)
    batch.input_ids = [0, 0]  # both inputs still "on the device"
    batch.unread_rows, batch.unread_slots = [0, 1], [0, 1]

    def resolve(ids: torch.Tensor) -> None:
        ids.index_copy_(0, torch.tensor([0, 1]), torch.tensor(true_ids))

    with torch.inference_mode():
        got = twin.graphs.run(batch, GraphShape(2, 1), resolve_unread=resolve)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


def test_batches_outside_the_captured_shapes_run_eagerly(checkpoint):
    twin = Twin(checkpoint, max_num_seqs=2, max_query_len=2)
    twin.prefill({"a": 3, "b": 3, "c": 3})
    assert twin.graphs.shape_for(twin.batch({"a": 1, "b": 1, "c": 1})) is None
    assert twin.graphs.shape_for(twin.batch({"a": 3})) is None
    assert twin.graphs.shape_for(twin.batch({"a": 1, "b": 2})) == GraphShape(2, 2)


# Sliding windows (Mistral's 7 positions: shorter than the sequences here), partial RoPE (Phi-3), tanh-GELU with
# scaled embeddings and a head size that is not hidden / heads (Gemma), and Gemma 3's sandwich norms, local layers
# with their own RoPE and soft-capped logits, Gemma 2's soft-capped attention scores, in the captured, padded steps.
# MoE models: captured steps run the graph-safe experts, gathered for one sequence (fewer picks than experts), dense
# for more; Qwen2-MoE's shared expert, Qwen3-MoE's dense layer; OLMo's output-only norms and q/k norms over all heads;
# DeepSeek-V3's latent attention over the padded backend and its grouped sigmoid routing, GLM-4.5's; GPT-OSS's sinks
# and biased experts; Llama 4's chunked attention, query temperature and input-weighted experts; Mistral 4's latent
# attention with the query temperature and softmax routing within groups; MiniMax-M2's partial RoPE and sigmoid routing.
OTHER_FAMILIES = {"mistral": make_tiny_mistral, "phi3": make_tiny_phi3, "gemma": make_tiny_gemma,
                  "gemma2": make_tiny_gemma2, "gemma3": make_tiny_gemma3, "mixtral": make_tiny_mixtral,
                  "qwen2_moe": make_tiny_qwen2_moe, "qwen3_moe": make_tiny_qwen3_moe, "olmo2": make_tiny_olmo2,
                  "olmoe": make_tiny_olmoe, "glm4": make_tiny_glm4, "cohere2": make_tiny_cohere2,
                  "phi2": make_tiny_phi2, "deepseek_v3": make_tiny_deepseek_v3, "glm4_moe": make_tiny_glm4_moe,
                  "gpt_oss": make_tiny_gpt_oss, "llama4": make_tiny_llama4, "mistral4": make_tiny_mistral4,
                  "minimax_m2": make_tiny_minimax_m2}


@pytest.fixture(scope="module", params=sorted(OTHER_FAMILIES))
def family_checkpoint(request, tmp_path_factory):
    return OTHER_FAMILIES[request.param](tmp_path_factory.mktemp(request.param), seed=3, vocab_size=VOCAB)


def test_replayed_steps_of_other_families_equal_eager(family_checkpoint):
    """... and read nothing on the host (the captured forward of each shape, MoE experts included)."""
    from host_syncs import recorded_host_syncs

    twin = Twin(family_checkpoint)
    twin.prefill({"a": 11, "b": 3, "c": 17})
    for work in ({"a": 1, "b": 1, "c": 1}, {"b": 1}, {"a": 3, "c": 2}, {"a": 2, "b": 3, "c": 1}):
        batch = twin.batch(work)
        expected = twin.eager_logits(batch, twin.eager, twin.eager_cache)
        with torch.inference_mode():
            got = twin.graphs.run(batch, twin.graphs.shape_for(batch), resolve_unread=lambda ids: None)
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
        with torch.inference_mode(), recorded_host_syncs() as syncs:
            twin.graphs._forward(twin.graphs.shape_for(batch))
        assert syncs == []


# gemma2 has Mistral's windows and Gemma 3's sandwich norms and logit cap too; cohere2 LayerNorm, parallel branches,
# interleaved RoPE and NoPE layers; deepseek_v3 latent attention and grouped routing; gpt_oss sinks and the graph-safe
# (biased) experts, Mixtral's too; llama4 chunks, the query temperature and input-weighted experts. Phi-3's partial
# RoPE, gemma3's second RoPE table and olmo2's q/k norms over all heads (float32 sums) are spared CI time.
@pytest.mark.parametrize("family", ["gemma2", "cohere2", "deepseek_v3", "gpt_oss", "llama4"])
def test_captured_steps_of_other_families_compile_as_one_graph(family, tmp_path):
    twin = Twin(OTHER_FAMILIES[family](tmp_path, seed=3, vocab_size=VOCAB), pack=False)
    twin.prefill({"a": 12, "b": 3})
    batch = twin.batch({"a": 3, "b": 3})
    shape = GraphShape(2, 3)
    twin.graphs.inputs.write(batch, shape)
    compiled = torch.compile(lambda: twin.graphs._forward(shape), fullgraph=True, dynamic=False)
    with torch.inference_mode():
        got = compiled()[: batch.num_tokens]
    torch.testing.assert_close(got, twin.eager_logits(batch, twin.eager, twin.eager_cache), atol=1e-5, rtol=1e-5)


def test_captured_forward_has_no_host_sync(checkpoint):
    from host_syncs import recorded_host_syncs

    twin = Twin(checkpoint)
    twin.prefill({"a": 4, "b": 7})
    batch = twin.batch({"a": 2, "b": 1})
    shape = twin.graphs.shape_for(batch)
    twin.graphs.inputs.write(batch, shape)
    with torch.inference_mode(), recorded_host_syncs() as syncs:
        twin.graphs._forward(shape)
    assert syncs == []


@pytest.mark.parametrize(("pack", "query_len"), [(True, 1), (False, 1), (False, 3)])
def test_captured_forward_compiles_as_one_graph(checkpoint, pack, query_len):
    """torch.compile(fullgraph=True) fails on any graph break: what the CUDA graph records is one program
    (decode and verify steps without packed weights, as on a GPU; packed weights only serve uncompiled CPU
    steps: Inductor cannot lower oneDNN's matmul over a weight that is not a frozen constant)."""
    twin = Twin(checkpoint, pack=pack)
    twin.prefill({"a": 9, "b": 3})
    batch = twin.batch({"a": query_len, "b": query_len})
    shape = GraphShape(2, query_len)
    twin.graphs.inputs.write(batch, shape)
    compiled = torch.compile(lambda: twin.graphs._forward(shape), fullgraph=True, dynamic=False)
    with torch.inference_mode():
        got = compiled()[: batch.num_tokens]
    expected = twin.eager_logits(batch, twin.eager, twin.eager_cache)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
