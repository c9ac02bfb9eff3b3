"""Which attention backend a model runs with (``--attention-backend``)."""

from __future__ import annotations

import torch

from executor_svc.attention.backend import AttentionBackend

TRITON_MAX_HEAD_DIM = 128
"""The widest head the Triton kernels take (triton_kernels.MAX_HEAD_DIM, kept here so choosing imports nothing)."""


def resolve_backend_name(name: str, device: torch.device, head_dim: int | None = None,
                         triton_lacks: str | None = None) -> str:
    """``auto`` resolved: triton on CUDA when Triton imports and the model's attention fits its kernels (heads up to
    128 wide, ``head_dim`` None: unknown; ``triton_lacks`` None: the model needs nothing the kernels lack, else what,
    as ModelVariant.triton_lacks names it), graph-safe with batched prefill and decode; torch_padded on CUDA
    otherwise (graph-safe too: Gemma 2's 256-wide heads, latent attention's 576, GPT-OSS's sinks);
    else torch (the CPU path and the reference). Explicit names are returned as given, triton refused for attention
    its kernels do not take."""
    wide = head_dim is not None and head_dim > TRITON_MAX_HEAD_DIM
    if name == "triton" and wide:
        raise ValueError(f"attention_backend: triton takes heads up to {TRITON_MAX_HEAD_DIM} wide, this model's "
                         f"cache holds {head_dim}; use auto or torch_padded")
    if name == "triton" and triton_lacks:
        raise ValueError(f"attention_backend: the triton kernels take no {triton_lacks} (this model has it); "
                         "use auto or torch_padded")
    if name != "auto":
        return name
    if device.type == "cuda" and _triton_importable():
        return "torch_padded" if wide or triton_lacks else "triton"
    return "torch"


def build_attention_backend(name: str, device: torch.device, head_dim: int | None = None,
                            triton_lacks: str | None = None) -> AttentionBackend:
    """A fresh backend instance for ``name`` (auto, torch, torch_padded or triton) on ``device`` for a model with
    heads ``head_dim`` wide that may need what the Triton kernels lack (see resolve_backend_name)."""
    resolved = resolve_backend_name(name, device, head_dim, triton_lacks)
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
