"""Random weights in place of a checkpoint's (``--load-format dummy``): for speed measurements of a model's
shape without its weights, which speed does not depend on. Seeded, so every run on the same kind of device
draws the same numbers."""

from __future__ import annotations

import torch

INIT_STD = 0.02
"""The normal init of HF Llama-family models: activations stay in range at any depth, in bf16 too."""

MAX_BLOCK_ELEMENTS = 1 << 24
"""Most fp32 values drawn at once (64 MiB): the transient buffer beside a large low-precision weight."""


@torch.no_grad()
def init_dummy_weights(model: torch.nn.Module, seed: int = 0) -> None:
    """Fill every parameter: norm weights with 1, biases with 0, the rest from N(0, INIT_STD).

    Values are drawn on the parameter's own device: a CPU generator draws ~170 M values/s on one thread,
    which made every load of an 8B shape spend most of a minute here before its first step."""
    generators: dict[torch.device, torch.Generator] = {}
    for name, param in model.named_parameters():
        if "norm" in name:
            param.fill_(1.0)
        elif "bias" in name:
            param.zero_()
        else:
            generator = generators.get(param.device)
            if generator is None:
                generator = generators[param.device] = torch.Generator(device=param.device).manual_seed(seed)
            _fill_normal(param, generator)


def _fill_normal(param: torch.Tensor, generator: torch.Generator) -> None:
    """Drawn in fp32 (the same numbers for any dtype), a row block at a time."""
    row_elements = param[0].numel() if param.dim() > 1 else param.numel()
    rows = max(1, MAX_BLOCK_ELEMENTS // max(1, row_elements))
    for start in range(0, param.shape[0], rows):
        block = param[start : start + rows]
        values = torch.empty(block.shape, dtype=torch.float32, device=param.device)
        block.copy_(values.normal_(0.0, INIT_STD, generator=generator))
