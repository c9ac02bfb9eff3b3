"""Compiles, before the executor reports ready, every attention kernel an eager step can launch.

Triton compiles a kernel once per distinct set of compile-time constants. Captured decode and verify steps
compile theirs during capture, but an eager step (a prefill, a mixed step) picks its query tile from its
longest query and its KV splits from its batch, so without this a new combination compiled inside some
request's step: on the H100, hundreds of milliseconds of TTFT and a slower first benchmark run.
"""

from __future__ import annotations

from typing import Any

import torch

from executor_svc.attention.triton_backend import TritonAttentionBackend
from executor_svc.host_batch import HostBatch
from executor_svc.kv_cache import PagedKVCache


@torch.inference_mode()
def warm_up_attention_kernels(model: torch.nn.Module, kv_cache: PagedKVCache, backend: object,
                              device: torch.device) -> int:
    """One eager forward of one sequence per kernel variant the Triton backend can choose for an eager step
    (``eager_variants``); returns how many forwards ran (0 for a backend that compiles nothing).

    The forwards run the model's own layers, so a model whose layers cap their scores (``logit_softcap``, a
    compile-time switch of the kernel) warms the capped kernels, and one mixing capped and uncapped layers
    both. The forwards write only the KV blocks they use, before any request owns one."""
    if not isinstance(backend, TritonAttentionBackend):
        return 0
    from executor_svc.attention.triton_kernels import eager_variants

    config: Any = model.config  # the HF config the model was built from
    group = config.num_attention_heads // config.num_key_value_heads
    variants = eager_variants(group)
    if backend.num_splits is not None:  # a fixed number of splits: one kernel per query-tile shape
        variants = tuple(dict.fromkeys((query_len, backend.num_splits) for query_len, _ in variants))
    chosen = backend.num_splits
    forwards = 0
    try:
        for query_len, num_splits in variants:
            num_blocks = -(-query_len // kv_cache.block_size)
            if num_blocks > kv_cache.num_blocks:
                continue
            backend.num_splits = num_splits
            batch = HostBatch(kv_cache.block_size)
            batch.add_sequence([0] * query_len, 0, list(range(num_blocks)))
            input_ids, positions, meta = batch.to_device(device)
            model(input_ids, positions, meta, kv_cache)
            forwards += 1
    finally:
        backend.num_splits = chosen
    return forwards
