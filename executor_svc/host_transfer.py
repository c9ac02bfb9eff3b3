"""Copies between host and device that never stall the device's queue of work.

Host to device: values are packed into pinned memory and copied with ``non_blocking=True``. Pinned
blocks come from torch's caching host allocator, which records an event on the stream at every such
copy and hands a block out again only once that event has completed; so a buffer reused by a later
step is never rewritten while an earlier copy may still read it. (A plain ``torch.tensor(values,
device="cuda")`` would copy from pageable memory, which waits for everything already queued.)

Device to host: ``HostCopy`` starts the copies into pinned memory and records an event after them;
``wait()`` blocks only the calling thread, on that event.

On CPU both directions are plain tensor construction and no-ops.
"""

from __future__ import annotations

import torch
from torch import Tensor


def host_list_to_device(
    values: list, device: torch.device | str, dtype: torch.dtype = torch.long
) -> Tensor:
    """Copies a host list to ``device``, through pinned memory on CUDA so the copy is async."""
    if torch.device(device).type == "cuda":
        # Built in pinned memory directly: no pageable tensor to copy from first.
        return torch.tensor(values, dtype=dtype, pin_memory=True).to(device, non_blocking=True)
    return torch.tensor(values, dtype=dtype)


def host_column_to_device(values: list[float], device: torch.device | str) -> Tensor:
    """A [N, 1] float32 device tensor of per-row values."""
    return host_list_to_device(values, device, torch.float32).unsqueeze(1)


class HostCopy:
    """Device tensors on their way to the host, fenced by an event recorded after the copies."""

    def __init__(self, tensors: list[Tensor]) -> None:
        self._event = None
        if tensors and tensors[0].device.type == "cuda":
            self._host = [_pinned_like(tensor).copy_(tensor, non_blocking=True) for tensor in tensors]
            self._event = torch.cuda.Event()
            self._event.record()
        else:
            self._host = tensors

    def wait(self) -> list[Tensor]:
        """The host tensors, once the copies are done (blocks this thread only)."""
        if self._event is not None:
            self._event.synchronize()
        return self._host


def _pinned_like(tensor: Tensor) -> Tensor:
    """An empty host tensor in pinned memory (from the caching host allocator), shaped like ``tensor``."""
    return torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=True)
