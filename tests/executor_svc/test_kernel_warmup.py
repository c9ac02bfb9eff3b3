"""Warm-up of the Triton attention kernels: every kernel variant an eager step can launch is launched
before the first request (so none compiles inside a request's step)."""

from __future__ import annotations

import os

import pytest
import torch
from tiny_models import make_tiny_llama

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
pytest.importorskip("triton")

from executor_svc.attention import triton_kernels  # noqa: E402
from executor_svc.attention.kernel_warmup import warm_up_attention_kernels  # noqa: E402
from executor_svc.attention.metadata import AttentionMetadata  # noqa: E402
from executor_svc.attention.torch_backend import TorchAttentionBackend  # noqa: E402
from executor_svc.attention.triton_backend import TritonAttentionBackend  # noqa: E402
from executor_svc.host_batch import HostBatch  # noqa: E402
from executor_svc.kv_cache import PagedKVCache  # noqa: E402
from executor_svc.model_loader import load_model  # noqa: E402

BLOCK_SIZE = 16


def kernel_variant(group: int, max_query_len: int, num_splits: int) -> tuple[int, int]:
    """The compile-time shape paged_attention launches: (BLOCK_Q, NUM_SPLITS)."""
    return triton_kernels._tile_shape(group, max_query_len)[1], num_splits


@pytest.mark.parametrize("group", [1, 2, 3, 4, 8, 16])
def test_the_query_tile_variants_cover_every_query_length(group):
    warmed = {kernel_variant(group, n, 1) for n in triton_kernels.query_tile_variants(group)}
    assert {kernel_variant(group, n, 1) for n in range(1, 4097)} == warmed
    assert len(warmed) == len(triton_kernels.query_tile_variants(group))  # one forward per tile shape


@pytest.mark.parametrize("group", [1, 3, 8])
def test_every_kernel_an_eager_step_can_launch_is_a_warmed_variant(group):
    launchable = {kernel_variant(group, query_len, triton_kernels.eager_num_splits(splits, query_len))
                  for query_len in range(1, 600) for splits in range(1, 40)}
    warmed = [kernel_variant(group, query_len, splits) for query_len, splits in triton_kernels.eager_variants(group)]
    assert launchable == set(warmed) and len(warmed) == len(set(warmed))  # each variant warmed once
    assert [triton_kernels.eager_num_splits(n, 1) for n in (1, 2, 3, 5, 8, 15, 16, 44)] == [1, 2, 2, 4, 8, 8, 16, 16]
    assert triton_kernels.eager_num_splits(16, 2) == 1


def meta_for(num_seqs: int, is_static: bool, query_len: int = 1) -> AttentionMetadata:
    meta = AttentionMetadata.build([query_len] * num_seqs, [1000] * num_seqs, [list(range(64))] * num_seqs, BLOCK_SIZE,
                                   torch.device("cpu"))
    return meta if not is_static else AttentionMetadata(**{**meta.__dict__, "is_static": True})


def test_captured_steps_keep_the_exact_number_of_splits_and_eager_steps_round_it(monkeypatch):
    # The globals the method reads (another test re-imports triton_backend, so patching by module path can miss).
    monkeypatch.setitem(TritonAttentionBackend._num_splits.__globals__, "_num_sms", lambda device: 132)
    backend = TritonAttentionBackend()
    q, kv_layer = torch.zeros(16, 4, 8), torch.zeros(64, 2, BLOCK_SIZE, 2, 8)
    # 16 sequences x 2 KV heads = 32 programs: ceil(132 / 32) = 5 splits fill the SMs, 4 for an eager step.
    assert backend._num_splits(q, kv_layer, meta_for(16, is_static=True)) == 5
    assert backend._num_splits(q, kv_layer, meta_for(16, is_static=False)) == 4
    assert backend._num_splits(q, kv_layer, meta_for(16, is_static=False, query_len=2)) == 1


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory):
    return make_tiny_llama(tmp_path_factory.mktemp("tiny"), vocab_size=128)


def launched_variants(monkeypatch, group: int) -> set[tuple[int, int]]:
    """Record each attention launch's variant instead of running the kernels (the interpreter is slow; the
    kernels' outputs are tested in test_triton_attention.py)."""
    launched: set[tuple[int, int]] = set()

    def record(out, q, kv_layer, query_start_loc, seq_lens, block_tables, max_query_len, scale, num_splits=1,
               sliding_window=None, logit_softcap=None, attention_chunk=None):  # runtime kernel arguments: no variant
        launched.add(kernel_variant(group, max_query_len, num_splits))

    monkeypatch.setattr(triton_kernels, "paged_attention", record)
    monkeypatch.setattr(triton_kernels, "write_kv", lambda k, v, kv_layer, slot_mapping: None)
    return launched


@pytest.mark.parametrize("num_splits", [None, 2])
def test_warm_up_launches_every_eager_variant_once_per_forward(monkeypatch, tiny_model_dir, num_splits):
    backend = TritonAttentionBackend(num_splits=num_splits)
    model = load_model(tiny_model_dir, torch.float32, "cpu", backend)
    config = model.config
    cache = PagedKVCache(config.num_hidden_layers, 8, BLOCK_SIZE, config.num_key_value_heads,
                         config.hidden_size // config.num_attention_heads, torch.float32, "cpu")
    group = config.num_attention_heads // config.num_key_value_heads
    launched = launched_variants(monkeypatch, group)
    forwards = warm_up_attention_kernels(model, cache, backend, torch.device("cpu"))
    if num_splits is None:
        expected = {kernel_variant(group, n, s) for n, s in triton_kernels.eager_variants(group)}
    else:
        expected = {kernel_variant(group, n, num_splits) for n in triton_kernels.query_tile_variants(group)}
    assert launched == expected and forwards == len(expected)
    assert backend.num_splits == num_splits  # the backend's own choice is back


def test_warm_up_stops_at_the_query_lengths_the_cache_cannot_hold(monkeypatch, tiny_model_dir):
    backend = TritonAttentionBackend(num_splits=1)
    model = load_model(tiny_model_dir, torch.float32, "cpu", backend)
    config = model.config
    cache = PagedKVCache(config.num_hidden_layers, 1, BLOCK_SIZE, config.num_key_value_heads,
                         config.hidden_size // config.num_attention_heads, torch.float32, "cpu")
    launched = launched_variants(monkeypatch, 2)
    assert warm_up_attention_kernels(model, cache, backend, torch.device("cpu")) == 5  # 1..16 tokens: one block
    assert max(block_q for block_q, _ in launched) == 16


def test_other_backends_compile_nothing(tiny_model_dir):
    backend = TorchAttentionBackend()
    model = load_model(tiny_model_dir, torch.float32, "cpu", backend)
    cache = PagedKVCache(2, 4, BLOCK_SIZE, 2, 16, torch.float32, "cpu")
    assert warm_up_attention_kernels(model, cache, backend, torch.device("cpu")) == 0


def compiled_kernels(fn) -> int:
    """Kernels a @triton.jit function has compiled in this process (Triton 3.x keeps them per device)."""
    caches = getattr(fn, "device_caches", None)
    if caches is None:
        pytest.skip("this Triton keeps no per-device kernel cache to count")
    return sum(len(entry[0]) for entry in caches.values())


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_after_warm_up_eager_steps_of_any_shape_compile_nothing(tiny_model_dir):
    device = torch.device("cuda")
    backend = TritonAttentionBackend()
    model = load_model(tiny_model_dir, torch.bfloat16, device, backend)
    config = model.config
    cache = PagedKVCache(config.num_hidden_layers, 256, BLOCK_SIZE, config.num_key_value_heads,
                         config.hidden_size // config.num_attention_heads, torch.bfloat16, device)
    assert warm_up_attention_kernels(model, cache, backend, device) > 0
    kernels = (triton_kernels._attention_kernel, triton_kernels._combine_kernel, triton_kernels._write_kv_kernel)
    before = [compiled_kernels(fn) for fn in kernels]
    generator = torch.Generator().manual_seed(0)
    for _ in range(30):  # mixed batches: prefill chunks beside decodes, new lengths and table widths each step
        batch = HostBatch(BLOCK_SIZE)
        for seq in range(int(torch.randint(1, 17, (1,), generator=generator))):
            context = int(torch.randint(0, 150, (1,), generator=generator))
            query = int(torch.randint(1, 100, (1,), generator=generator)) if seq % 3 == 0 else 1
            blocks = -(-(context + query) // BLOCK_SIZE)
            batch.add_sequence([1] * query, context, list(range(seq * 16, seq * 16 + blocks)))
        model(*batch.to_device(device), cache)
    torch.cuda.synchronize()
    assert [compiled_kernels(fn) for fn in kernels] == before


@pytest.mark.parametrize(("spec", "warmed"), [({}, 1), ({"spec_method": "draft_model", "num_spec_tokens": 2}, 2),
                                              ({"spec_method": "ngram", "num_spec_tokens": 2}, 1)],
                         ids=["plain", "draft_model", "ngram"])
def test_build_runner_warms_the_target_and_a_draft_model(monkeypatch, tiny_model_dir, tmp_path, spec, warmed):
    from executor_svc import server
    from executor_svc.config import ExecutorConfig

    calls = []
    monkeypatch.setattr(server, "warm_up_attention_kernels",
                        lambda model, cache, backend, device: calls.append((model, cache)) or 0)
    if spec.get("spec_method") == "draft_model":
        spec = {**spec, "draft_model_dir": str(make_tiny_llama(tmp_path / "draft", seed=5, vocab_size=128))}
    runner = server.build_runner(ExecutorConfig(model_dir=str(tiny_model_dir), num_kv_blocks=8,
                                                attention_backend="torch", **spec))[0]
    assert len(calls) == warmed
    assert calls[0] == (runner.model, runner.kv_cache)
    if warmed == 2:
        assert calls[1] == (runner.drafter.model, runner.drafter.kv_cache)
