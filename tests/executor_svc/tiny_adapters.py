"""Random LoRA adapters saved by peft for the tiny checkpoints, and peft's own greedy continuations as references."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

ALL_PROJECTIONS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def make_peft_adapter(model_dir: str | Path, out: str | Path, seed: int, rank: int = 4, alpha: float = 8.0,
                      target_modules: list[str] | None = None, scale: float = 0.3, **options: Any) -> Path:
    """Save a LoRA adapter for ``model_dir`` with random A and B (peft initialises B to zero; here both are drawn,
    with ``scale`` large enough that the adapter changes greedy tokens), through peft's own save_pretrained."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    config = LoraConfig(r=rank, lora_alpha=alpha, target_modules=target_modules or ALL_PROJECTIONS,
                        init_lora_weights=False, **options)
    model = get_peft_model(base, config)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_" in name:
                param.copy_(scale * torch.randn(param.shape, generator=generator))
    out = Path(out)
    model.save_pretrained(out)
    return out


def peft_greedy(model_dir: str | Path, adapter_dir: str | Path | None, prompt: list[int], max_new_tokens: int
                ) -> list[int]:
    """peft's greedy continuation of ``prompt`` (the base model's with ``adapter_dir`` None), fp32 on the CPU."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    if adapter_dir is not None:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, str(adapter_dir))
    model.eval()
    tokens = list(prompt)
    with torch.no_grad():  # a plain loop over full forwards: no generation config (EOS, caching) in the way
        for _ in range(max_new_tokens):
            tokens.append(int(model(input_ids=torch.tensor([tokens])).logits[0, -1].argmax()))
    return tokens[len(prompt):]
