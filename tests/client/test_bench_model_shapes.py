"""--model-shape: weightless model directories of real shapes, served with random weights."""

from __future__ import annotations

import json

import pytest
import torch
from tiny_models import make_tiny_llama

from client.bench.model_shapes import SHAPES, num_parameters, shape_config, write_shape_dir
from executor_svc.attention.torch_backend import TorchAttentionBackend
from executor_svc.model_loader import load_model


@pytest.fixture
def tokenizer_dir(tmp_path):
    directory = make_tiny_llama(tmp_path / "tokenizer", vocab_size=320)
    (directory / "tokenizer.json").write_text("{}")
    return directory


def test_shape_directories_hold_a_config_and_the_tokenizer_but_no_weights(tokenizer_dir, tmp_path):
    out = write_shape_dir("1.7b", tokenizer_dir, tmp_path / "shape")
    config = json.loads((out / "config.json").read_text())
    assert config["vocab_size"] == 320 and config["num_hidden_layers"] == 24
    assert (out / "tokenizer.json").is_file()
    assert not list(out.glob("*.safetensors"))


def test_parameter_counts_match_the_models_they_name(tokenizer_dir):
    counts = {name: num_parameters({**shape_config(name, tokenizer_dir), "vocab_size": 49152}) for name in SHAPES}
    assert counts["default"] == pytest.approx(134.5e6, rel=0.01)  # SmolLM2-135M
    assert counts["1.7b"] == pytest.approx(1.71e9, rel=0.01)  # SmolLM2-1.7B
    assert 7.0e9 < counts["8b"] < 8.1e9  # Llama-3-8B layers, a smaller vocabulary
    assert counts["moe"] - counts["default"] == 30 * (3 * 576 * 768 * 8 + 576 * 8 - 3 * 576 * 1536)


def test_a_shape_directory_loads_with_dummy_weights(tokenizer_dir, tmp_path, monkeypatch):
    monkeypatch.setitem(SHAPES, "tiny", dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                             num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                                             tie_word_embeddings=True))
    out = write_shape_dir("tiny", tokenizer_dir, tmp_path / "tiny")
    model = load_model(out, torch.float32, "cpu", TorchAttentionBackend(), load_format="dummy")
    assert sum(p.numel() for p in model.parameters()) == num_parameters(shape_config("tiny", tokenizer_dir))
    again = load_model(out, torch.float32, "cpu", TorchAttentionBackend(), load_format="dummy")
    assert torch.equal(model.embed_weight, again.embed_weight)  # seeded: every rank draws the same
    assert float(model.embed_weight.std()) == pytest.approx(0.02, rel=0.1)
    with pytest.raises(ValueError, match="model_shape"):
        shape_config("70b", tokenizer_dir)


def test_the_moe_shape_loads_as_mixtral_with_every_expert_counted(tokenizer_dir, tmp_path, monkeypatch):
    tiny_moe = {**SHAPES["moe"], "hidden_size": 32, "intermediate_size": 16, "num_hidden_layers": 2,
                "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8}
    monkeypatch.setitem(SHAPES, "tiny_moe", tiny_moe)
    out = write_shape_dir("tiny_moe", tokenizer_dir, tmp_path / "tiny_moe")
    model = load_model(out, torch.float32, "cpu", TorchAttentionBackend(), load_format="dummy")
    assert model.variant.moe is not None and model.variant.moe.num_experts == 8
    assert sum(p.numel() for p in model.parameters()) == num_parameters(shape_config("tiny_moe", tokenizer_dir))
