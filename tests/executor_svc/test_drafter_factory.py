"""Which drafter --spec-method builds: eagle_ngram wraps the EAGLE-style head with the n-gram lookup, auto takes it
where a head is shipped and runs without one elsewhere, and what cannot be served is refused with the field named."""

from __future__ import annotations

import pytest
import torch

from executor_svc.attention.torch_backend import TorchAttentionBackend
from executor_svc.config import ExecutorConfig
from executor_svc.drafters.eagle import EagleDrafter
from executor_svc.drafters.eagle_ngram import EagleNgramDrafter
from executor_svc.drafters.factory import build_drafter
from executor_svc.model_loader import load_hf_config, load_model


def build(model_dir, **fields):
    config = ExecutorConfig(model_dir=str(model_dir), **fields)
    backend = TorchAttentionBackend()
    target = load_model(str(model_dir), torch.float32, "cpu", backend)
    return build_drafter(config, load_hf_config(str(model_dir)), 32, backend, target_model=target)


def test_eagle_ngram_wraps_the_head_and_the_lookup(tiny_model_dir, tiny_eagle_dir):
    drafter = build(tiny_model_dir, spec_method="eagle_ngram", eagle_dir=str(tiny_eagle_dir), ngram_min_n=3,
                    ngram_max_n=5)
    assert isinstance(drafter, EagleNgramDrafter) and drafter.reads_target_hidden
    assert drafter.eagle.source_dir == str(tiny_eagle_dir)
    assert (drafter.ngram.min_n, drafter.ngram.max_n) == (3, 5)
    assert isinstance(build(tiny_model_dir, spec_method="eagle", eagle_dir=str(tiny_eagle_dir)), EagleDrafter)


def test_auto_without_a_shipped_head_runs_without_a_drafter(tiny_model_dir):
    assert build(tiny_model_dir, spec_method="auto") is None


@pytest.mark.parametrize("method", ["eagle", "eagle_ngram"])
def test_an_eagle_method_without_a_head_is_refused(tiny_model_dir, method):
    with pytest.raises(ValueError, match="^eagle_dir: no EAGLE-style drafter is shipped"):
        build(tiny_model_dir, spec_method=method)


def test_an_eagle_drafter_dir_needs_an_eagle_method(tiny_eagle_dir):
    with pytest.raises(ValueError, match="^eagle_dir: is only used with spec_method eagle, eagle_ngram or auto"):
        ExecutorConfig(model_dir="m", spec_method="ngram", eagle_dir=str(tiny_eagle_dir))
