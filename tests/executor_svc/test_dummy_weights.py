"""Random weights for speed runs: their values, their seed, and where they are drawn."""

from __future__ import annotations

import pytest
import torch

from executor_svc.dummy_weights import INIT_STD, init_dummy_weights


class TwoLayers(torch.nn.Module):
    def __init__(self, device: str = "cpu", dtype: torch.dtype = torch.float32) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(512, 256, device=device, dtype=dtype)
        self.norm = torch.nn.RMSNorm(256, device=device, dtype=dtype)
        self.head = torch.nn.Linear(256, 1000, bias=False, device=device, dtype=dtype)


def test_norms_are_one_biases_zero_and_the_rest_normal():
    model = TwoLayers()
    init_dummy_weights(model)
    assert bool((model.norm.weight == 1).all())
    assert bool((model.proj.bias == 0).all())
    for weight in (model.proj.weight.detach(), model.head.weight.detach()):
        assert abs(float(weight.mean())) < 5 * INIT_STD / weight.numel() ** 0.5
        assert float(weight.std()) == pytest.approx(INIT_STD, rel=0.03)


def test_the_same_seed_draws_the_same_weights_and_another_seed_others():
    first, second, third = TwoLayers(), TwoLayers(), TwoLayers()
    init_dummy_weights(first)
    init_dummy_weights(second)
    init_dummy_weights(third, seed=1)
    assert torch.equal(first.head.weight, second.head.weight)
    assert not torch.equal(first.head.weight, third.head.weight)


def test_low_precision_weights_are_the_fp32_draw_rounded():
    full, half = TwoLayers(), TwoLayers(dtype=torch.bfloat16)
    init_dummy_weights(full)
    init_dummy_weights(half)
    assert torch.equal(half.head.weight, full.head.weight.to(torch.bfloat16))


def test_large_weights_are_drawn_in_blocks_with_the_numbers_of_one_sequence(monkeypatch):
    """On the CPU, drawing row blocks gives the numbers of one draw: the block size is free to change."""
    whole = TwoLayers()
    init_dummy_weights(whole)
    monkeypatch.setattr("executor_svc.dummy_weights.MAX_BLOCK_ELEMENTS", 256 * 7)  # 7 rows of head at a time
    blocked = TwoLayers()
    init_dummy_weights(blocked)
    assert torch.equal(whole.head.weight, blocked.head.weight)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_weights_are_drawn_on_the_device_reproducibly():
    first, second = TwoLayers("cuda", torch.bfloat16), TwoLayers("cuda", torch.bfloat16)
    init_dummy_weights(first)
    init_dummy_weights(second)
    assert first.head.weight.is_cuda and torch.equal(first.head.weight, second.head.weight)
    assert float(first.head.weight.float().std()) == pytest.approx(INIT_STD, rel=0.03)
