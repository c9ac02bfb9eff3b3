"""Tiny random-weight HF checkpoints (fp32, seeded) for fast tests of the executor."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

TINY_LLAMA_DEFAULTS: dict[str, Any] = {
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 128,
    "max_position_embeddings": 512,
    "rms_norm_eps": 1e-5,
    # Larger than HF's 0.02 so attention is peaked and logits differ by O(1): bugs cannot hide under atol.
    "initializer_range": 0.1,
    "tie_word_embeddings": False,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "pad_token_id": 0,
}


def make_tiny_llama(path: str | Path, seed: int = 0, vocab_size: int = 256, **overrides: Any) -> Path:
    """Write a random LlamaForCausalLM checkpoint (config.json + model.safetensors) into `path`."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(**{**TINY_LLAMA_DEFAULTS, "vocab_size": vocab_size, **overrides})
    return _save(LlamaForCausalLM, config, path, seed)


def make_tiny_qwen2(path: str | Path, seed: int = 0, vocab_size: int = 256, **overrides: Any) -> Path:
    """Write a random Qwen2ForCausalLM checkpoint (q/k/v biases) into `path`."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(**{**TINY_LLAMA_DEFAULTS, "vocab_size": vocab_size, **overrides})
    return _save(Qwen2ForCausalLM, config, path, seed)


def make_tiny_qwen3(path: str | Path, seed: int = 0, vocab_size: int = 256, **overrides: Any) -> Path:
    """Write a random Qwen3ForCausalLM checkpoint (per-head q/k RMSNorm) into `path`."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    config = Qwen3Config(**{**TINY_LLAMA_DEFAULTS, "head_dim": 16, "vocab_size": vocab_size, **overrides})
    return _save(Qwen3ForCausalLM, config, path, seed)


def _save(model_class: Any, config: Any, path: str | Path, seed: int) -> Path:
    torch.manual_seed(seed)
    model = model_class(config).to(torch.float32)
    _randomise_small_params(model)
    path = Path(path)
    model.save_pretrained(path)
    return path


def _randomise_small_params(model: torch.nn.Module) -> None:
    """Give norms and biases random values too, so a weight routed to the wrong place changes the output."""
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                param.copy_(1.0 + 0.1 * torch.randn_like(param))
            elif name.endswith(".bias"):
                param.copy_(0.1 * torch.randn_like(param))
