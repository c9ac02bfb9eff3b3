"""Builds the configured drafter (checks a draft model shares the target's vocabulary)."""

from __future__ import annotations

import torch

from executor_svc.config import ExecutorConfig
from executor_svc.drafters.base import Drafter
from executor_svc.drafters.draft_model import DraftModelDrafter
from executor_svc.drafters.ngram import NgramDrafter


def build_drafter(config: ExecutorConfig, target_config, num_blocks: int, attention_backend) -> Drafter | None:
    """None without speculation; otherwise the drafter named by config.spec_method."""
    if config.spec_method == "none":
        return None
    if config.spec_method == "ngram":
        return NgramDrafter(config.ngram_min_n, config.ngram_max_n)
    return _draft_model(config, target_config, num_blocks, attention_backend)


def _draft_model(config: ExecutorConfig, target_config, num_blocks: int, attention_backend) -> DraftModelDrafter:
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
        head_dim, dtype, device,
    )
    return DraftModelDrafter(model, kv_cache, config.block_size, device)
