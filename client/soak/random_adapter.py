"""A random LoRA adapter in peft's format for a model directory (the soak serves and swaps such adapters: their
tokens are not checked, only that the server handles them)."""

from __future__ import annotations

import json
from pathlib import Path

PROJECTIONS = {"q_proj": "self_attn", "k_proj": "self_attn", "v_proj": "self_attn", "o_proj": "self_attn",
               "gate_proj": "mlp", "up_proj": "mlp", "down_proj": "mlp"}


def write_random_lora(model_dir: str | Path, out: str | Path, seed: int, rank: int = 8) -> Path:
    """Write adapter_config.json and adapter_model.safetensors for every projection of every layer of the model in
    ``model_dir`` (its config.json) into ``out``; returns ``out``."""
    import torch
    from safetensors.torch import save_file

    config = json.loads((Path(model_dir) / "config.json").read_text())
    hidden, heads = config["hidden_size"], config["num_attention_heads"]
    head_dim = config.get("head_dim") or hidden // heads
    q_rows, kv_rows = heads * head_dim, config.get("num_key_value_heads", heads) * head_dim
    inter = config["intermediate_size"]
    shapes = {"q_proj": (hidden, q_rows), "k_proj": (hidden, kv_rows), "v_proj": (hidden, kv_rows),
              "o_proj": (q_rows, hidden), "gate_proj": (hidden, inter), "up_proj": (hidden, inter),
              "down_proj": (inter, hidden)}
    generator = torch.Generator().manual_seed(seed)
    tensors = {}
    for layer in range(config["num_hidden_layers"]):
        for projection, block in PROJECTIONS.items():
            in_features, out_features = shapes[projection]
            prefix = f"base_model.model.model.layers.{layer}.{block}.{projection}"
            tensors[f"{prefix}.lora_A.weight"] = 0.05 * torch.randn(rank, in_features, generator=generator)
            tensors[f"{prefix}.lora_B.weight"] = 0.05 * torch.randn(out_features, rank, generator=generator)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(out / "adapter_model.safetensors"))
    adapter_config = {"peft_type": "LORA", "r": rank, "lora_alpha": 2 * rank, "target_modules": list(PROJECTIONS),
                      "bias": "none", "lora_dropout": 0.0, "task_type": "CAUSAL_LM"}
    (out / "adapter_config.json").write_text(json.dumps(adapter_config, indent=2))
    return out
