"""A small random-weight Llama with the default model's tokenizer: the scheduling-bound benchmark regime.

Its forward costs about as much as one step's scheduling, RPC and detokenization, the way a large
model's forward does on a fast GPU; it is where running one step ahead pays most.
"""

from __future__ import annotations

import shutil
from pathlib import Path

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "special_tokens_map.json")


def make_small_checkpoint(out_dir: Path, tokenizer_dir: Path, num_layers: int = 2, hidden_size: int = 64,
                          seed: int = 0) -> Path:
    """Write (once) a random fp32 Llama sharing tokenizer_dir's vocabulary into out_dir."""
    if (out_dir / "model.safetensors").is_file():
        return out_dir
    import json

    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    source = json.loads((tokenizer_dir / "config.json").read_text())
    config = LlamaConfig(
        vocab_size=source["vocab_size"], hidden_size=hidden_size, intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers, num_attention_heads=4, num_key_value_heads=2,
        max_position_embeddings=source.get("max_position_embeddings", 2048), tie_word_embeddings=True,
        bos_token_id=source.get("bos_token_id"), eos_token_id=source.get("eos_token_id"),
    )
    torch.manual_seed(seed)
    scratch = out_dir.with_name(out_dir.name + ".partial")
    shutil.rmtree(scratch, ignore_errors=True)
    # transformers decorates `to` with functools.wraps, which mypy types as unbound (self expected first).
    LlamaForCausalLM(config).to(torch.float32).save_pretrained(scratch)
    for name in TOKENIZER_FILES:
        if (tokenizer_dir / name).is_file():
            shutil.copy(tokenizer_dir / name, scratch / name)
    scratch.rename(out_dir)
    return out_dir
