"""Which shipped EAGLE-style drafter a target gets: the default model's own (served by `auto` as eagle_ngram), never
one for another model or for random weights of the same shape."""

from __future__ import annotations

import pytest
import torch
from tiny_models import make_tiny_llama

from executor_svc.attention.torch_backend import TorchAttentionBackend
from executor_svc.config import ExecutorConfig
from executor_svc.drafters.eagle_head import read_head_config
from executor_svc.drafters.eagle_ngram import EagleNgramDrafter
from executor_svc.drafters.factory import build_drafter
from executor_svc.drafters.shipped import SHIPPED_DIR, shipped_drafter_for
from executor_svc.model_loader import load_hf_config, load_model


@pytest.mark.slow
def test_the_default_model_gets_its_drafter_and_random_weights_of_its_shape_do_not(default_model_dir):
    model = load_model(default_model_dir, torch.float32, "cpu", TorchAttentionBackend())
    shipped = shipped_drafter_for(model)
    assert shipped == SHIPPED_DIR / "SmolLM2-135M-Instruct"
    config = read_head_config(shipped)
    assert config.draft_vocab_size < config.target_vocab_size  # a reduced draft vocabulary
    assert sum(f.stat().st_size for f in shipped.iterdir()) <= 20 * 2**20
    dummy = load_model(default_model_dir, torch.float32, "cpu", TorchAttentionBackend(), load_format="dummy")
    assert shipped_drafter_for(dummy) is None
    auto = build_drafter(ExecutorConfig(model_dir=str(default_model_dir), spec_method="auto"),
                         load_hf_config(str(default_model_dir)), 32,
                         TorchAttentionBackend(), target_model=model)
    assert isinstance(auto, EagleNgramDrafter) and auto.eagle.source_dir == str(shipped)


def test_a_tiny_model_gets_none(tmp_path):
    model = load_model(make_tiny_llama(tmp_path), torch.float32, "cpu", TorchAttentionBackend())
    assert shipped_drafter_for(model) is None
