"""EAGLE-style drafters shipped with stepahead, and which target each one belongs to.

A shipped drafter's config records a probe of its target's weights (a few embedding values); a loaded
target matches when its shape and probe do, so a random-weight model of the same shape never does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from executor_svc.drafters.eagle_head import read_head_config

SHIPPED_DIR = Path(__file__).parent / "shipped_drafters"
PROBE_ROWS = (100, 1000, 10000)
PROBE_COLUMNS = 4


def target_probe(model: Any) -> list[float]:
    """A few of the target's embedding values (rows PROBE_ROWS that exist, first PROBE_COLUMNS columns)."""
    weight = model.embed_weight
    rows = [row for row in PROBE_ROWS if row < weight.shape[0]]
    return weight[rows, :PROBE_COLUMNS].float().flatten().tolist()


def probe_matches(expected: list[float], model: Any) -> bool:
    """Whether the model's probe equals ``expected`` (to bfloat16 precision: the target may run in it)."""
    got = torch.tensor(target_probe(model))
    wanted = torch.tensor(expected)
    return got.shape == wanted.shape and bool(torch.allclose(got, wanted, rtol=1e-2, atol=1e-4))


def shipped_drafter_for(model: Any) -> Path | None:
    """The shipped drafter directory whose target is ``model``, or None."""
    if model is None or not SHIPPED_DIR.is_dir():
        return None
    for candidate in sorted(SHIPPED_DIR.iterdir()):
        try:
            config = read_head_config(candidate)
        except (FileNotFoundError, ValueError):
            continue
        same_shape = (config.target_vocab_size, config.target_hidden_size) == (
            model.config.vocab_size, model.config.hidden_size)
        if same_shape and config.target_probe and probe_matches(config.target_probe, model):
            return candidate
    return None
