"""Latent attention (DeepSeek-V2/V3): its cache holds one latent per token, its checkpoints' extra layers are
skipped, and what it does not support is refused by name.

The models themselves are checked against HF transformers in test_llama.py (logits, with YaRN's mscale), captured
in cuda_graphs/test_step_graphs.py and over two ranks in parallel/test_tensor_parallel_runner.py."""

from __future__ import annotations

import pytest
import torch
from tiny_models import make_tiny_deepseek_v3, make_tiny_glm4_moe

from executor_svc.attention.selection import resolve_backend_name
from executor_svc.attention.torch_backend import TorchAttentionBackend
from executor_svc.model_loader import load_hf_config, load_model
from executor_svc.models.kv_layout import kv_layout
from executor_svc.models.llama_weights import load_weights
from executor_svc.models.mla_settings import MlaSettings
from executor_svc.parallel.tensor_parallel import TensorParallel


def test_the_cache_holds_one_latent_and_rotated_key_per_token_on_every_rank():
    from transformers import DeepseekV3Config

    config = DeepseekV3Config()  # DeepSeek-V3's own shape: 128 heads, a 512-wide latent, 64 rotated dims
    layout = kv_layout(config)
    assert (layout.num_kv_heads, layout.head_dim, layout.values_are_keys) == (1, 512 + 64, True)
    assert kv_layout(config, TensorParallel(1, 4)) == layout  # replicated, not split
    per_token = layout.bytes_per_block(1, 1, torch.bfloat16)
    assert per_token == (512 + 64) * 2, "the latent is stored once, read as key and as value"
    decompressed = 2 * config.num_attention_heads * (128 + 64) * 2  # bf16 keys and values of every head
    assert decompressed / per_token > 85
    cache = layout.cache(2, 3, 4, torch.float32, "cpu")
    assert [tuple(layer.shape) for layer in cache.layers] == [(3, 1, 4, 1, 576)] * 2


def test_multi_token_prediction_layers_after_the_decoder_are_skipped_and_only_those(tmp_path):
    from safetensors.torch import load_file

    path = make_tiny_glm4_moe(tmp_path, num_nextn_predict_layers=1)
    model = load_model(path, torch.float32, torch.device("cpu"), TorchAttentionBackend())
    state = load_file(path / "model.safetensors")
    mtp = {"model.layers.2.eh_proj.weight": torch.zeros(64, 128), "model.layers.2.mlp.gate.weight": torch.zeros(8, 64)}
    load_weights(model, [*state.items(), *mtp.items()])
    model.config.num_nextn_predict_layers = 0
    with pytest.raises(ValueError, match="unexpected tensor 'model.layers.2"):
        load_weights(model, [*state.items(), *mtp.items()])


def test_lora_and_eagle_drafters_are_refused_for_latent_attention(tmp_path):
    from executor_svc.drafters.eagle_head import EagleHead
    from executor_svc.lora.adapter_files import read_adapter
    from executor_svc.lora.module_spec import parse_lora_modules
    from executor_svc.lora.stacking import LoraStack

    path = make_tiny_deepseek_v3(tmp_path / "model")
    config = load_hf_config(path)
    with pytest.raises(ValueError, match="lora_modules: adapter 'sql'.*latent-attention"):
        read_adapter(parse_lora_modules([f"sql={tmp_path}"])[0], config)
    model = load_model(path, torch.float32, torch.device("cpu"), TorchAttentionBackend())
    with pytest.raises(ValueError, match="lora: .*latent-attention"):
        LoraStack(model, 2, 4)
    with pytest.raises(ValueError, match="model_type: EAGLE-style drafters are not built for latent-attention"):
        EagleHead(config, 64)


def test_wide_heads_choose_the_padded_backend_on_cuda_and_refuse_triton(monkeypatch):
    import executor_svc.attention.selection as selection

    monkeypatch.setattr(selection, "_triton_importable", lambda: True)
    cuda = torch.device("cuda")
    assert resolve_backend_name("auto", cuda, head_dim=576) == "torch_padded"
    assert resolve_backend_name("auto", cuda, head_dim=256) == "torch_padded"  # Gemma 2's heads
    assert resolve_backend_name("auto", cuda, head_dim=128) == "triton"
    assert resolve_backend_name("auto", torch.device("cpu"), head_dim=576) == "torch"
    with pytest.raises(ValueError, match="attention_backend: triton takes heads up to 128"):
        resolve_backend_name("triton", cuda, head_dim=576)


@pytest.mark.parametrize(("field", "value"), [("qk_rope_head_dim", 7), ("kv_lora_rank", 0), ("q_lora_rank", 0)])
def test_out_of_range_latent_settings_are_refused_naming_the_field(field, value):
    fields = {"q_lora_rank": None, "kv_lora_rank": 16, "qk_nope_head_dim": 8, "qk_rope_head_dim": 8,
              "v_head_dim": 8, "rope_interleaved": True, "scale": 0.25, "biased": False}
    with pytest.raises(ValueError, match=field):
        MlaSettings(**{**fields, field: value})
