"""Model shapes the benchmark can serve with random weights (``--model-shape``): speed depends on a model's
shape, not its weight values, so a directory with a config.json and the default model's tokenizer is
served with ``--load-format dummy`` and the HF peers are built from the same config."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "generation_config.json")

SHAPES: dict[str, dict[str, Any]] = {
    # SmolLM2-135M: the default model itself (real weights unless a shape is asked for).
    "default": dict(hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
                    num_key_value_heads=3, head_dim=64, tie_word_embeddings=True),
    "1.7b": dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=24, num_attention_heads=32,
                 num_key_value_heads=32, head_dim=64, tie_word_embeddings=True),
    # Llama-3-8B's layers with the default tokenizer's (smaller) vocabulary.
    "8b": dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
               num_key_value_heads=8, head_dim=128, tie_word_embeddings=False),
    # The default model's layers with Mixtral's MLP: 8 experts of half its MLP width, 2 per token (the default
    # model's MLP compute per token, 4x its MLP weights).
    "moe": dict(architectures=["MixtralForCausalLM"], model_type="mixtral", hidden_size=576, intermediate_size=768,
                num_local_experts=8, num_experts_per_tok=2, num_hidden_layers=30, num_attention_heads=9,
                num_key_value_heads=3, head_dim=64, tie_word_embeddings=True),
}


def shape_config(name: str, tokenizer_dir: Path) -> dict[str, Any]:
    """The config.json of shape ``name`` over the vocabulary and special tokens of ``tokenizer_dir``."""
    if name not in SHAPES:
        raise ValueError(f"model_shape: must be one of {sorted(SHAPES)}, got {name!r}")
    source = json.loads((tokenizer_dir / "config.json").read_text())
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": source["vocab_size"],
        "max_position_embeddings": 8192,
        "rms_norm_eps": 1e-5,
        "rope_theta": 100000.0,
        "hidden_act": "silu",
        "bos_token_id": source.get("bos_token_id"),
        "eos_token_id": source.get("eos_token_id"),
        "pad_token_id": source.get("pad_token_id"),
        "torch_dtype": "bfloat16",
        **SHAPES[name],
    }


def write_shape_dir(name: str, tokenizer_dir: Path, out_dir: Path) -> Path:
    """A weightless model directory of shape ``name``: config.json plus the tokenizer files."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "config.json").write_text(json.dumps(shape_config(name, tokenizer_dir), indent=2))
    for file_name in TOKENIZER_FILES:
        if (tokenizer_dir / file_name).is_file():
            shutil.copy(tokenizer_dir / file_name, out_dir / file_name)
    return out_dir


def num_parameters(config: dict[str, Any]) -> int:
    """Weights of a Llama-family config (embeddings, layers, final norm, untied LM head; every expert and the
    router of a Mixtral-style one)."""
    hidden, inter, layers = config["hidden_size"], config["intermediate_size"], config["num_hidden_layers"]
    head_dim = config.get("head_dim") or hidden // config["num_attention_heads"]
    q = config["num_attention_heads"] * head_dim
    kv = config["num_key_value_heads"] * head_dim
    experts = config.get("num_local_experts")
    mlp = 3 * hidden * inter * experts + hidden * experts if experts else 3 * hidden * inter
    per_layer = hidden * (q + 2 * kv) + q * hidden + mlp + 2 * hidden
    embeddings = config["vocab_size"] * hidden * (1 if config.get("tie_word_embeddings") else 2)
    return embeddings + layers * per_layer + hidden
