"""Catching host synchronisations on the CPU: the operations that would make a CUDA step wait for the device."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch.utils._python_dispatch import TorchDispatchMode

# Reading a tensor's value on the host (.item(), .tolist(), int(t), bool(t), ...) and ops whose output
# shape depends on values: on CUDA each waits for every kernel queued before it.
SYNCING_OPS = {"aten._local_scalar_dense.default", "aten.nonzero.default", "aten.masked_select.default",
               "aten.unique.default", "aten._unique2.default"}


class _Recorder(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.syncs: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        name = str(func)
        if name in SYNCING_OPS:
            self.syncs.append(name)
        elif name in ("aten.index.Tensor", "aten.index_put_.default", "aten.index_put.default") and any(
            isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in args[1] if i is not None
        ):
            self.syncs.append(f"{name} with a boolean mask")
        return func(*args, **(kwargs or {}))


@contextmanager
def recorded_host_syncs() -> Iterator[list[str]]:
    """Yields a list that fills with the syncing ops run inside the block.

    Tensor.tolist() on a CPU tensor does not go through the dispatcher, so it is wrapped as well."""
    recorder = _Recorder()
    tolist = torch.Tensor.tolist

    def recording_tolist(tensor: torch.Tensor):  # type: ignore[no-untyped-def]
        recorder.syncs.append("Tensor.tolist")
        return tolist(tensor)

    torch.Tensor.tolist = recording_tolist  # type: ignore[method-assign]
    try:
        with recorder:
            yield recorder.syncs
    finally:
        torch.Tensor.tolist = tolist  # type: ignore[method-assign]
