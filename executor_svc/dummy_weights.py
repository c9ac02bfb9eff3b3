"""Random weights in place of a checkpoint's (``--load-format dummy``): for speed measurements of a model's
shape without its weights, which speed does not depend on. Seeded, so every rank and run draws the same."""

from __future__ import annotations

import torch

INIT_STD = 0.02
"""The normal init of HF Llama-family models: activations stay in range at any depth, in bf16 too."""


@torch.no_grad()
def init_dummy_weights(model: torch.nn.Module, seed: int = 0) -> None:
    """Fill every parameter: norm weights with 1, biases with 0, the rest from N(0, INIT_STD)."""
    generator = torch.Generator(device="cpu").manual_seed(seed)
    for name, param in model.named_parameters():
        if "norm" in name:
            param.fill_(1.0)
        elif "bias" in name:
            param.zero_()
        else:
            # Drawn in fp32 on the CPU (the same numbers on any device and dtype), a row block at a time.
            rows = max(1, (1 << 24) // max(1, param[0].numel() if param.dim() > 1 else param.numel()))
            for start in range(0, param.shape[0], rows):
                block = param[start : start + rows]
                values = torch.empty(block.shape, dtype=torch.float32).normal_(0.0, INIT_STD, generator=generator)
                block.copy_(values)
