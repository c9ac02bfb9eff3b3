"""The weight-read floor of a decode step: every weight is read from device memory once per step, so a step
takes at least (bytes of weights) / (memory bandwidth), whatever the batch. For a large model at small batch
this is the bound a decode step is compared with; the bandwidth is measured, not taken from a data sheet."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import torch

from client.bench.model_shapes import num_parameters

COPY_BYTES = 1 << 30
"""Size of the buffer copied to measure bandwidth (large enough that caches do not matter)."""
COPY_REPEATS = 10


def measure_copy_bandwidth(device: torch.device, num_bytes: int = COPY_BYTES, repeats: int = COPY_REPEATS) -> float:
    """Bytes per second moved by a device-to-device copy (each copy reads and writes ``num_bytes``): the median
    over ``repeats`` copies after one untimed copy."""
    if num_bytes < 1 or repeats < 1:
        raise ValueError(f"num_bytes and repeats: must be >= 1, got {num_bytes} and {repeats}")
    source = torch.empty(num_bytes, dtype=torch.uint8, device=device)
    target = torch.empty_like(source)
    target.copy_(source)
    seconds = [_timed_copy(source, target) for _ in range(repeats)]
    del source, target
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return 2 * num_bytes / sorted(seconds)[len(seconds) // 2]


def weight_read_floor(model_dir: str, dtype: torch.dtype, bandwidth_bytes_s: float) -> dict[str, Any]:
    """The floor of one decode step for the checkpoint in ``model_dir`` with weights in ``dtype``."""
    if bandwidth_bytes_s <= 0:
        raise ValueError(f"bandwidth_bytes_s: must be > 0, got {bandwidth_bytes_s}")
    config = json.loads((Path(model_dir) / "config.json").read_text())
    weight_bytes = num_parameters(config) * torch.empty((), dtype=dtype).element_size()
    floor_ms = 1000 * weight_bytes / bandwidth_bytes_s
    return {"weight_bytes": weight_bytes, "bandwidth_gb_s": bandwidth_bytes_s / 1e9, "floor_ms": floor_ms,
            "max_tok_s_batch1": 1000 / floor_ms}


def _timed_copy(source: torch.Tensor, target: torch.Tensor) -> float:
    if source.device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        target.copy_(source)
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1000
    began = time.perf_counter()
    target.copy_(source)
    return time.perf_counter() - began
