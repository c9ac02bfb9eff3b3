"""Builds the configured drafter (checks a draft model shares the target's vocabulary)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from executor_svc.attention.backend import AttentionBackend
from executor_svc.config import ExecutorConfig
from executor_svc.cuda_graphs.step_graphs import GraphCapture, StepGraphs
from executor_svc.drafters.base import Drafter
from executor_svc.drafters.draft_model import DraftModelDrafter
from executor_svc.drafters.ngram import NgramDrafter


def build_drafter(
    config: ExecutorConfig,
    target_config: Any,
    num_blocks: int,
    attention_backend: AttentionBackend,
    make_capture: Callable[[], GraphCapture] | None = None,
    max_blocks_per_seq: int = 0,
) -> Drafter | None:
    """None without speculation; otherwise the drafter named by config.spec_method.

    ``make_capture``: record the draft model's one-token decode steps as graphs (None: eager), over
    block tables of up to ``max_blocks_per_seq`` blocks."""
    if config.spec_method == "none":
        return None
    if config.spec_method == "ngram":
        return NgramDrafter(config.ngram_min_n, config.ngram_max_n)
    return _draft_model(config, target_config, num_blocks, attention_backend, make_capture, max_blocks_per_seq)


def _draft_model(
    config: ExecutorConfig,
    target_config: Any,
    num_blocks: int,
    attention_backend: AttentionBackend,
    make_capture: Callable[[], GraphCapture] | None,
    max_blocks_per_seq: int,
) -> DraftModelDrafter:
    from executor_svc.kv_cache import PagedKVCache
    from executor_svc.model_loader import load_hf_config, load_model

    if config.draft_model_dir is None:  # ExecutorConfig requires it for draft_model; kept for the type
        raise ValueError("draft_model_dir: required when spec_method is draft_model")
    draft_config = load_hf_config(config.draft_model_dir)
    if draft_config.vocab_size != target_config.vocab_size:
        raise ValueError(
            f"draft_model: vocab_size {draft_config.vocab_size} of {config.draft_model_dir} differs from the "
            f"target's {target_config.vocab_size}; a draft model must share the target's vocabulary"
        )
    device = torch.device(config.device)
    dtype = getattr(torch, config.torch_dtype_name)
    model = load_model(config.draft_model_dir, dtype, device, attention_backend)
    head_dim = getattr(draft_config, "head_dim", None) or draft_config.hidden_size // draft_config.num_attention_heads
    kv_cache = PagedKVCache(
        draft_config.num_hidden_layers, num_blocks, config.block_size, draft_config.num_key_value_heads,
        head_dim, dtype, device, scratch_blocks=1 if make_capture is not None else 0,
    )
    graphs = None
    if make_capture is not None:
        graphs = StepGraphs(model, kv_cache, config.max_num_seqs, 1, max_blocks_per_seq, make_capture)
        graphs.capture_all()
    return DraftModelDrafter(model, kv_cache, config.block_size, device, graphs)
