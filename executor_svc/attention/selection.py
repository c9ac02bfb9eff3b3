"""Which attention backend a model runs with (``--attention-backend``)."""

from __future__ import annotations

import torch

from executor_svc.attention.backend import AttentionBackend


def resolve_backend_name(name: str, device: torch.device) -> str:
    """``auto`` resolved: triton on CUDA when Triton imports (graph-safe, batched prefill and decode),
    else torch (the CPU path and the reference). Explicit names are returned as given."""
    if name != "auto":
        return name
    if device.type == "cuda" and _triton_importable():
        return "triton"
    return "torch"


def build_attention_backend(name: str, device: torch.device) -> AttentionBackend:
    """A fresh backend instance for ``name`` (auto, torch, torch_padded or triton) on ``device``."""
    resolved = resolve_backend_name(name, device)
    if resolved == "torch":
        from executor_svc.attention.torch_backend import TorchAttentionBackend

        return TorchAttentionBackend()
    if resolved == "torch_padded":
        from executor_svc.attention.padded_torch_backend import PaddedTorchAttentionBackend

        return PaddedTorchAttentionBackend()
    if resolved == "triton":
        from executor_svc.attention.triton_backend import TritonAttentionBackend, triton_available

        if not triton_available():
            raise ValueError("attention_backend: triton needs the triton package and a CUDA device")
        return TritonAttentionBackend()
    raise ValueError(f"attention_backend: unknown backend {name!r}")


def is_graph_safe(backend: AttentionBackend) -> bool:
    """Whether the backend reads only device tensors (no host lists), so a CUDA graph can capture it."""
    return bool(getattr(backend, "graph_safe", False))


def _triton_importable() -> bool:
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True
