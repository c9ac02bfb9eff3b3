"""Host/device copies: plain tensors on CPU; on CUDA, pinned and asynchronous, fenced by an event."""

from __future__ import annotations

import pytest
import torch

from executor_svc.host_transfer import HostCopy, host_column_to_device, host_list_to_device


def test_cpu_copies_are_plain_tensors():
    ids = host_list_to_device([1, 2, 3], "cpu")
    assert ids.dtype == torch.long and ids.tolist() == [1, 2, 3]
    assert host_column_to_device([0.5, 2.0], "cpu").shape == (2, 1)
    copy = HostCopy([ids])
    assert copy.wait()[0] is ids


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_copies_round_trip_through_pinned_memory():
    on_device = host_list_to_device(list(range(1000)), "cuda")
    assert on_device.is_cuda
    doubled = on_device * 2
    copy = HostCopy([doubled])
    (host,) = copy.wait()
    assert host.is_pinned() and host.tolist() == [2 * i for i in range(1000)]
