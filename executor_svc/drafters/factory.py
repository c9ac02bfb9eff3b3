"""Builds the configured drafter (checks a draft model shares the target's vocabulary)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from executor_svc.attention.backend import AttentionBackend
from executor_svc.config import EAGLE_METHODS, ExecutorConfig
from executor_svc.cuda_graphs.step_graphs import GraphCapture, StepGraphs
from executor_svc.drafters.base import Drafter
from executor_svc.drafters.draft_model import DraftModelDrafter
from executor_svc.drafters.eagle import EagleDrafter
from executor_svc.drafters.eagle_head import load_head
from executor_svc.drafters.eagle_ngram import EagleNgramDrafter
from executor_svc.drafters.ngram import NgramDrafter
from executor_svc.drafters.shared_target import SharedTargetTensors, shared_target_tensors
from executor_svc.drafters.shipped import shipped_drafter_for
from executor_svc.models.cpu_matmul_plan import add_plans_for
from executor_svc.models.kv_layout import kv_layout
from executor_svc.parallel.tensor_parallel import SINGLE, TensorParallel
from stepahead_common.cache_dir import stepahead_cache_dir


def build_drafter(
    config: ExecutorConfig,
    target_config: Any,
    num_blocks: int,
    attention_backend: AttentionBackend,
    make_capture: Callable[[], GraphCapture] | None = None,
    max_blocks_per_seq: int = 0,
    target_model: Any = None,
    tp: TensorParallel = SINGLE,
) -> Drafter | None:
    """None without speculation; otherwise the drafter named by config.spec_method (auto: eagle_ngram with the
    EAGLE-style head shipped for the target when there is one, else none).

    ``make_capture``: record the drafter's one-token decode steps (draft model, EAGLE-style head) as graphs
    (None: eager), over block tables of up to ``max_blocks_per_seq`` blocks. ``target_model``: the loaded
    target (an EAGLE-style drafter shares its embedding and LM head). ``tp``: the target's tensor-parallel group
    (drafters are replicated on every rank)."""
    method = config.spec_method
    if method in EAGLE_METHODS:
        target = shared_target_tensors(target_model, tp) if target_model is not None else None
        eagle_dir = _eagle_dir(config, target)
        if eagle_dir is None:
            return None
        drafter = build_eagle_drafter(eagle_dir, target_config, target, num_blocks, config.block_size,
                                      attention_backend, scratch_block=make_capture is not None, tp=tp)
        if make_capture is not None:
            drafter.capture_step_graphs(config.max_num_seqs, max_blocks_per_seq, make_capture)
        if method == "eagle":
            return drafter
        return EagleNgramDrafter(drafter, NgramDrafter(config.ngram_min_n, config.ngram_max_n))
    if method == "none":
        return None
    if method == "ngram":
        return NgramDrafter(config.ngram_min_n, config.ngram_max_n)
    return _draft_model(config, target_config, num_blocks, attention_backend, make_capture, max_blocks_per_seq)


def _eagle_dir(config: ExecutorConfig, target_model: SharedTargetTensors | None) -> str | None:
    """The EAGLE-style drafter to load: --eagle-drafter, else the one shipped for this target; None under
    auto when there is none."""
    if config.eagle_dir is not None:
        return config.eagle_dir
    shipped = shipped_drafter_for(target_model)
    if shipped is None and config.spec_method != "auto":
        raise ValueError(f"eagle_dir: no EAGLE-style drafter is shipped for {config.model_dir}; train one with "
                         "`stepahead train-drafter` and pass it with --eagle-drafter DIR")
    return None if shipped is None else str(shipped)


def build_eagle_drafter(eagle_dir: str, target_config: Any, target_model: Any, num_blocks: int, block_size: int,
                        attention_backend: AttentionBackend, scratch_block: bool = False,
                        tp: TensorParallel = SINGLE) -> EagleDrafter:
    """Load the head for the target (``target_model``: its SharedTargetTensors, or a whole unsharded model) and
    give it a one-layer KV cache shaped like one of the target's (``scratch_block``: plus the block padded rows
    of captured steps write to). Under tensor parallelism every rank drafts what rank 0 drafts."""
    from executor_svc.kv_cache import PagedKVCache

    dtype, device = target_model.embed_weight.dtype, target_model.embed_weight.device
    head, _ = load_head(eagle_dir, target_config, attention_backend, dtype, device)
    attn = head.attention
    kv_cache = PagedKVCache(1, num_blocks, block_size, attn.num_kv_heads, attn.head_dim, dtype, device,
                            scratch_blocks=1 if scratch_block else 0)
    drafter = EagleDrafter(head, target_model, kv_cache, block_size, device, eagle_dir, tp)
    # The head's projections and its draft-vocabulary LM head run through the CPU matmul timed fastest for them.
    add_plans_for([*head.parameters(), drafter.step_model.lm_rows], stepahead_cache_dir() / "cpu_matmul")
    return drafter


def _draft_model(
    config: ExecutorConfig,
    target_config: Any,
    num_blocks: int,
    attention_backend: AttentionBackend,
    make_capture: Callable[[], GraphCapture] | None,
    max_blocks_per_seq: int,
) -> DraftModelDrafter:
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
    model = load_model(config.draft_model_dir, dtype, device, attention_backend,
                       pack_cpu_weights=config.cpu_weight_packing)
    layout = kv_layout(draft_config)
    kv_cache = layout.cache(draft_config.num_hidden_layers, num_blocks, config.block_size, dtype, device,
                            scratch_blocks=1 if make_capture is not None else 0)
    graphs = None
    if make_capture is not None:
        graphs = StepGraphs(model, kv_cache, config.max_num_seqs, 1, max_blocks_per_seq, make_capture)
        graphs.capture_all()
    return DraftModelDrafter(model, kv_cache, config.block_size, device, graphs)
