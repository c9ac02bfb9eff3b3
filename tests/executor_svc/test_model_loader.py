"""Loading checkpoints: safetensors (single and sharded), GGUF, and the errors for bad paths."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from tiny_models import (
    make_tiny_gemma3_vision,
    make_tiny_granite_moe,
    make_tiny_llama,
    make_tiny_llama_gguf,
    make_tiny_mixtral,
    make_tiny_phi3,
    make_tiny_qwen2,
    make_tiny_qwen2_moe,
)

from executor_svc.attention.metadata import AttentionMetadata
from executor_svc.attention.torch_backend import TorchAttentionBackend
from executor_svc.kv_cache import PagedKVCache
from executor_svc.model_loader import find_checkpoint, load_hf_config, load_model
from executor_svc.models.llama import LlamaModelForCausalLM
from executor_svc.models.registry import model_class_for

PROMPT = [5, 17, 99, 3, 250, 42, 7]


def prefill_logits(model: LlamaModelForCausalLM) -> torch.Tensor:
    """Logits of PROMPT prefilled through our model and a fresh paged cache."""
    config = model.config
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    dtype = model.embed_weight.dtype
    cache = PagedKVCache(config.num_hidden_layers, 4, 16, config.num_key_value_heads, head_dim, dtype, "cpu")
    meta = AttentionMetadata.build([len(PROMPT)], [len(PROMPT)], [[2]], 16, "cpu")
    with torch.inference_mode():
        hidden = model(torch.tensor(PROMPT), torch.arange(len(PROMPT)), meta, cache)
        return model.compute_logits(hidden)


def hf_logits(path: Path, **kwargs) -> torch.Tensor:
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, **kwargs).eval()
    with torch.inference_mode():
        return hf(torch.tensor([PROMPT])).logits[0]


def test_loads_a_safetensors_directory(tmp_path):
    path = make_tiny_qwen2(tmp_path, seed=4)
    model = load_model(path, torch.float32, torch.device("cpu"), TorchAttentionBackend())
    assert isinstance(model, LlamaModelForCausalLM)
    assert load_hf_config(path).model_type == "qwen2"
    torch.testing.assert_close(prefill_logits(model), hf_logits(path), atol=1e-4, rtol=0)


def test_loads_sharded_safetensors_through_the_index(tmp_path):
    single = make_tiny_llama(tmp_path / "single", seed=5)
    from transformers import AutoModelForCausalLM

    AutoModelForCausalLM.from_pretrained(single).save_pretrained(tmp_path / "sharded", max_shard_size="50KB")
    sharded = tmp_path / "sharded"
    assert (sharded / "model.safetensors.index.json").is_file()
    assert len(find_checkpoint(sharded).safetensors) > 1
    model = load_model(sharded, torch.float32, torch.device("cpu"), TorchAttentionBackend())
    torch.testing.assert_close(prefill_logits(model), hf_logits(single), atol=1e-4, rtol=0)


def test_loads_in_the_requested_dtype(tmp_path):
    path = make_tiny_llama(tmp_path, seed=6)
    model = load_model(path, torch.bfloat16, torch.device("cpu"), TorchAttentionBackend())
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    assert model.rope_cos.dtype == torch.bfloat16
    logits = prefill_logits(model)
    assert logits.dtype == torch.float32
    torch.testing.assert_close(logits, hf_logits(path), atol=0.1, rtol=0)


@pytest.mark.parametrize("pass_file", [False, True])
def test_loads_a_gguf_through_transformers(tmp_path, pass_file):
    gguf_file = make_tiny_llama_gguf(tmp_path / "tiny.gguf", seed=8)
    model_path = gguf_file if pass_file else tmp_path
    model = load_model(model_path, torch.float32, torch.device("cpu"), TorchAttentionBackend())
    expected = hf_logits(tmp_path, gguf_file=gguf_file.name)
    torch.testing.assert_close(prefill_logits(model), expected, atol=1e-4, rtol=0)


def test_unsupported_architecture_is_named(tmp_path):
    path = make_tiny_llama(tmp_path, seed=0)
    config_file = path / "config.json"
    config = json.loads(config_file.read_text())
    config["architectures"] = ["FancyForCausalLM"]
    config_file.write_text(json.dumps(config))
    with pytest.raises(ValueError, match=r"architectures: \['FancyForCausalLM'\]"):
        load_model(path, torch.float32, torch.device("cpu"), TorchAttentionBackend())


def test_a_context_longer_than_the_model_serves_exactly_is_refused_naming_max_model_len(tmp_path):
    from executor_svc.config import ExecutorConfig
    from executor_svc.server import build_runner

    longrope = {"rope_type": "longrope", "rope_theta": 10000.0, "short_factor": [1.0] * 8, "long_factor": [4.0] * 8,
                "original_max_position_embeddings": 128}
    path = make_tiny_phi3(tmp_path / "phi3", rope_parameters=longrope, original_max_position_embeddings=128)
    with pytest.raises(ValueError, match=r"max_model_len: 200 .*\(128: longrope"):
        build_runner(ExecutorConfig(model_dir=str(path), num_kv_blocks=16, max_model_len=200))
    _, description = build_runner(ExecutorConfig(model_dir=str(path), num_kv_blocks=16))
    assert description.max_model_len == 128
    with pytest.raises(ValueError, match="max_model_len: 513 "):
        build_runner(ExecutorConfig(model_dir=str(make_tiny_llama(tmp_path / "llama")), max_model_len=513))


def test_rope_tables_cover_the_cache_slots_not_more_than_the_config_allows(tmp_path):
    """A position needs a cache slot, so tables past the cache's slots (and a scratch block, and a verify step's
    drafts) are never read: Llama 4 Scout's 10M positions need not be tabulated for a cache of 100k slots."""
    from executor_svc.config import ExecutorConfig
    from executor_svc.server import build_runner

    path = make_tiny_llama(tmp_path / "llama")  # max_position_embeddings 512
    runner, description = build_runner(ExecutorConfig(model_dir=str(path), num_kv_blocks=4, block_size=16,
                                                      num_spec_tokens=3))
    assert runner.model.rope_cos.shape[0] == (4 + 1) * 16 + 3 + 1
    assert description.max_model_len == 512  # the context limit is still the model's
    runner, _ = build_runner(ExecutorConfig(model_dir=str(path), num_kv_blocks=64, block_size=16))
    assert runner.model.rope_cos.shape[0] == 512


def test_a_fused_tensor_of_the_wrong_size_is_named(tmp_path):
    from safetensors.torch import load_file, save_file

    path = make_tiny_phi3(tmp_path)
    tensors = load_file(path / "model.safetensors")
    name = "model.layers.1.self_attn.qkv_proj.weight"
    tensors[name] = tensors[name][:-1]
    save_file(tensors, path / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ValueError, match=r"weights: 'model.layers.1.self_attn.qkv_proj.weight' has shape \(127, 64\)"):
        load_model(path, torch.float32, torch.device("cpu"), TorchAttentionBackend())


@pytest.mark.parametrize("maker", [make_tiny_mixtral, make_tiny_qwen2_moe, make_tiny_granite_moe])
def test_moe_experts_load_from_transformers_stacked_layout_as_from_the_checkpoint(tmp_path, maker):
    """Checkpoints store each expert's projections; transformers (and so a GGUF read through it) holds them stacked
    per layer, Mixtral's router under ``mlp.``: both load into the same weights."""
    from transformers import AutoModelForCausalLM

    from executor_svc.models.llama_weights import load_weights

    path = maker(tmp_path, seed=3)
    from_files = load_model(path, torch.float32, torch.device("cpu"), TorchAttentionBackend())
    state = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).state_dict()
    assert any(name.endswith("experts.gate_up_proj") for name in state)
    from_stacked = load_model(path, torch.float32, torch.device("cpu"), TorchAttentionBackend())
    with torch.no_grad():
        for param in from_stacked.parameters():
            param.zero_()
    load_weights(from_stacked, state.items())
    for (name, expected), got in zip(from_files.state_dict().items(), from_stacked.state_dict().values()):
        assert torch.equal(got, expected), name
    down = next(name for name in state if name.endswith("experts.down_proj"))
    wrong = {**state, down: state[down][:-1]}
    with pytest.raises(ValueError, match=r"has shape \(5, 64, 48\)"):
        load_weights(from_stacked, wrong.items())


def test_a_vision_language_checkpoint_serves_its_language_model_and_still_names_missing_tensors(tmp_path):
    from safetensors.torch import load_file, save_file

    from executor_svc.config import ExecutorConfig
    from executor_svc.server import build_runner

    path = make_tiny_gemma3_vision(tmp_path, seed=2, vocab_size=300)
    config = load_hf_config(path)
    assert config.model_type == "gemma3_text" and config.num_hidden_layers == 2
    _, description = build_runner(ExecutorConfig(model_dir=str(path), num_kv_blocks=16))
    assert description.vocab_size == 300
    tensors = load_file(path / "model.safetensors")
    assert any(name.startswith("vision_tower.") for name in tensors)  # skipped, not refused
    del tensors["language_model.model.layers.1.mlp.down_proj.weight"]
    save_file(tensors, path / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ValueError, match=r"missing tensors model.layers.1.mlp.down_proj.weight"):
        load_model(path, torch.float32, torch.device("cpu"), TorchAttentionBackend())


def test_model_class_falls_back_on_model_type_without_architectures():
    from transformers import Qwen3Config

    config = Qwen3Config()
    config.architectures = None
    assert model_class_for(config) is LlamaModelForCausalLM


def test_missing_directory_is_named(tmp_path):
    missing = tmp_path / "nowhere"
    with pytest.raises(FileNotFoundError, match=str(missing)):
        load_model(missing, torch.float32, torch.device("cpu"), TorchAttentionBackend())
    with pytest.raises(FileNotFoundError, match=str(missing)):
        load_hf_config(missing)


def test_directory_without_weights_is_named(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(FileNotFoundError, match="no \\*.safetensors or \\*.gguf"):
        find_checkpoint(tmp_path)


def test_missing_config_is_named(tmp_path):
    path = make_tiny_llama(tmp_path, seed=0)
    (path / "config.json").unlink()
    with pytest.raises(FileNotFoundError, match="config.json"):
        find_checkpoint(path)


def test_missing_shard_is_named(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    index = {"weight_map": {"a": "model-00001-of-00002.safetensors"}}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(FileNotFoundError, match="model-00001-of-00002.safetensors"):
        find_checkpoint(tmp_path)
