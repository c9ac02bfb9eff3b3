"""A random LoRA adapter in peft's format for a model directory (the soak serves and swaps such adapters: their
tokens are not checked, only that the server handles them)."""

from __future__ import annotations

import json
from pathlib import Path


def write_random_lora(model_dir: str | Path, out: str | Path, seed: int, rank: int = 8) -> Path:
    """Write adapter_config.json and adapter_model.safetensors adapting every projection of every layer of the model
    in ``model_dir`` into ``out``; returns ``out``."""
    import torch
    from safetensors.torch import save_file
    from transformers import AutoConfig

    from executor_svc.lora.adapter_files import PROJECTIONS, module_name, projection_shape

    config = AutoConfig.from_pretrained(model_dir)
    generator = torch.Generator().manual_seed(seed)
    tensors = {}
    for layer in range(config.num_hidden_layers):
        for projection in PROJECTIONS:
            in_features, out_features = projection_shape(config, projection)
            prefix = f"base_model.model.{module_name(layer, projection)}"
            tensors[f"{prefix}.lora_A.weight"] = 0.05 * torch.randn(rank, in_features, generator=generator)
            tensors[f"{prefix}.lora_B.weight"] = 0.05 * torch.randn(out_features, rank, generator=generator)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(out / "adapter_model.safetensors"))
    adapter_config = {"peft_type": "LORA", "r": rank, "lora_alpha": 2 * rank, "target_modules": list(PROJECTIONS),
                      "bias": "none", "lora_dropout": 0.0, "task_type": "CAUSAL_LM"}
    (out / "adapter_config.json").write_text(json.dumps(adapter_config, indent=2))
    return out
