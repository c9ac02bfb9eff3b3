"""Llama 4's settings read from its config (chunked layers, the NoPE layers' query temperature, the q/k L2 norm,
the experts and dense widths), its router on hand-made logits, and what is refused by name. Exactness against HF is
in test_llama.py (text and vision-language checkpoints), the captured steps in test_step_graphs.py, tensor
parallelism in test_tensor_parallel_runner.py."""

from __future__ import annotations

import math

import pytest
import torch
from tiny_models import MINISTRAL3_ROPE, make_tiny_llama4, make_tiny_ministral3

from executor_svc.attention.selection import resolve_backend_name
from executor_svc.attention.torch_backend import TorchAttentionBackend
from executor_svc.model_loader import load_hf_config, load_model
from executor_svc.models.llama4_settings import QueryTemperature
from executor_svc.models.llama_weights import load_weights
from executor_svc.models.moe_routing import route
from executor_svc.models.variants import variant_for


def _scout_config(**overrides):
    from transformers import Llama4TextConfig

    return Llama4TextConfig(**overrides)  # Llama 4 Scout's shape: 48 layers, 16 experts, chunks of 8192


def test_a_scout_config_reads_as_chunked_rope_layers_and_tempered_nope_layers():
    variant = variant_for(_scout_config())
    nope = [index for index, rotary in enumerate(variant.rope_layers) if not rotary]
    assert nope == list(range(3, 48, 4))
    assert variant.layer_chunks == tuple(None if index in nope else 8192 for index in range(48))
    assert variant.query_temperature is not None and variant.query_temperature.floor_scale == 8192.0
    assert (variant.qk_norm, variant.qk_norm_after_rope, variant.rotary_interleaved) == ("l2", True, True)
    moe = variant.moe
    assert moe is not None and moe.sparse_layers == (True,) * 48
    assert (moe.num_experts, moe.top_k, moe.scoring, moe.weights_scale_inputs) == (16, 1, "sigmoid_of_top_logits",
                                                                                   True)
    assert (moe.shared_expert_intermediate_size, moe.dense_intermediate_size) == (8192, 16384)
    maverick = variant_for(_scout_config(interleave_moe_layer_step=2, num_local_experts=128))
    assert maverick.moe is not None and maverick.moe.sparse_layers == tuple(index % 2 == 1 for index in range(48))


def test_query_temperature_grows_with_the_log_of_the_position(tmp_path):
    model = load_model(make_tiny_llama4(tmp_path), torch.float32, torch.device("cpu"), TorchAttentionBackend())
    scale = model._query_scale(torch.tensor([0, 2, 3, 7, 15, 100]))
    expected = [1.0, 1.0, 1 + 0.3 * math.log(2), 1 + 0.3 * math.log(3), 1 + 0.3 * math.log(5), 1 + 0.3 * math.log(26)]
    torch.testing.assert_close(scale.flatten(), torch.tensor(expected))
    assert model.tempered_layers == (False, True, False, True)


def test_ministral3_tempers_every_layer_from_position_zero_by_its_rope_settings(tmp_path):
    from transformers import Ministral3Config

    released = variant_for(Ministral3Config())  # Ministral 3 8B: beta 0.1 over 16384 positions
    assert released.query_temperature == QueryTemperature(16384.0, 0.1, position_offset=0.0, every_layer=True)
    model = load_model(make_tiny_ministral3(tmp_path), torch.float32, torch.device("cpu"), TorchAttentionBackend())
    scale = model._query_scale(torch.tensor([0, 7, 8, 23, 24]))
    expected = [1.0, 1.0, 1 + 0.5 * math.log(2), 1 + 0.5 * math.log(3), 1 + 0.5 * math.log(4)]
    torch.testing.assert_close(scale.flatten(), torch.tensor(expected))
    assert model.tempered_layers == (True, True)
    rope = {**MINISTRAL3_ROPE, "llama_4_scaling_beta": 0.0}
    assert variant_for(Ministral3Config(rope_parameters=rope)).query_temperature is None
    broken = Ministral3Config(rope_parameters=MINISTRAL3_ROPE)
    broken.rope_parameters = {**MINISTRAL3_ROPE, "original_max_position_embeddings": None}
    with pytest.raises(ValueError, match="original_max_position_embeddings: must be an integer >= 1"):
        variant_for(broken)


def test_the_router_chooses_by_logits_and_weighs_by_their_sigmoid():
    settings = variant_for(_scout_config(num_local_experts=4, num_experts_per_tok=2)).moe
    assert settings is not None
    weight = torch.eye(4)
    x = torch.tensor([[30.0, 40.0, -1.0, 0.0], [0.5, -2.0, 1.5, 3.0]])  # 30 and 40 both squash to 1.0 in float32
    weights, ids = route(x, weight, settings)
    assert ids.tolist() == [[1, 0], [3, 2]]
    torch.testing.assert_close(weights, torch.tensor([[40.0, 30.0], [3.0, 1.5]]).sigmoid())


def test_no_chunks_no_temperature_and_no_norm_when_the_config_turns_them_off():
    variant = variant_for(_scout_config(attention_chunk_size=None, attn_temperature_tuning=False, use_qk_norm=False))
    assert variant.layer_chunks == (None,) * 48
    assert variant.query_temperature is None and variant.qk_norm is None


def test_chunks_run_on_the_triton_kernels_on_cuda(monkeypatch):
    import executor_svc.attention.selection as selection

    monkeypatch.setattr(selection, "_triton_importable", lambda: True)
    lacks = variant_for(_scout_config()).triton_lacks
    assert lacks is None
    assert resolve_backend_name("auto", torch.device("cuda"), head_dim=128, triton_lacks=lacks) == "triton"


def test_eagle_drafters_are_refused_for_chunked_attention(tmp_path):
    from executor_svc.drafters.eagle_head import EagleHead

    with pytest.raises(ValueError, match="model_type: EAGLE-style drafters .*chunked-attention targets"):
        EagleHead(load_hf_config(make_tiny_llama4(tmp_path)), 64)


@pytest.mark.parametrize(("overrides", "field"), [
    ({"attention_chunk_size": 0}, "attention_chunk_size"),
    ({"moe_layers": [0, 48]}, "moe_layers"),
    ({"floor_scale": 0}, "floor_scale"),
])
def test_out_of_range_settings_are_refused_naming_the_field(overrides, field):
    with pytest.raises(ValueError, match=f"^{field}: "):
        variant_for(_scout_config(**overrides))


def test_stacked_experts_of_the_wrong_shape_are_refused_naming_the_tensor(tmp_path):
    from safetensors.torch import load_file

    path = make_tiny_llama4(tmp_path)
    model = load_model(path, torch.float32, torch.device("cpu"), TorchAttentionBackend())
    name = "model.layers.1.feed_forward.experts.gate_up_proj"
    tensors = load_file(path / "model.safetensors")
    assert tuple(tensors[name].shape) == (4, 64, 64)  # [experts, hidden, 2 * intermediate]: as they multiply
    tensors[name] = tensors[name].transpose(1, 2).contiguous()[:, :, :32]
    with pytest.raises(ValueError, match=f"weights: '{name}' has shape"):
        load_weights(model, tensors.items())
