"""GPT-OSS: its released MXFP4 expert tensors load as the dequantised weights they hold, its attention sinks
choose a backend that has them, and what it does not support is refused by name.

The model itself is checked against HF transformers in test_llama.py (logits), captured in
cuda_graphs/test_step_graphs.py and over two ranks in parallel/test_tensor_parallel_runner.py."""

from __future__ import annotations

import pytest
import torch
from tiny_models import make_tiny_gpt_oss

from executor_svc.attention.selection import resolve_backend_name
from executor_svc.attention.torch_backend import TorchAttentionBackend
from executor_svc.model_loader import load_hf_config, load_model
from executor_svc.models.llama_weights import load_weights
from executor_svc.models.moe import SparseMoeBlock

FP4_VALUES = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]
"""The e2m1 values of the 16 codes (OCP microscaling spec)."""


def _quantise(shape: tuple[int, ...], generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Random MXFP4 blocks [E, rows, cols / 32, 16] and scales [E, rows, cols / 32], and the [E, rows, cols] values
    they encode (low nibble first, each group of 32 scaled by 2 ** (scale - 127)), written from the spec."""
    experts, rows, cols = shape
    codes = torch.randint(0, 16, (experts, rows, cols), generator=generator)
    scales = torch.randint(124, 130, (experts, rows, cols // 32), generator=generator, dtype=torch.int32)
    values = torch.tensor(FP4_VALUES)[codes] * torch.pow(2.0, scales.repeat_interleave(32, dim=-1) - 127.0)
    pairs = codes.view(experts, rows, cols // 32, 16, 2)
    blocks = (pairs[..., 0] | (pairs[..., 1] << 4)).to(torch.uint8)
    return blocks, scales.to(torch.uint8), values


def test_mxfp4_expert_tensors_load_as_the_values_they_encode(tmp_path):
    from safetensors.torch import load_file

    path = make_tiny_gpt_oss(tmp_path, intermediate_size=64)  # MXFP4 groups of 32 along every input dimension
    model = load_model(path, torch.float32, torch.device("cpu"), TorchAttentionBackend())
    config = model.config
    state = load_file(path / "model.safetensors")
    generator = torch.Generator().manual_seed(0)
    experts, hidden, size = config.num_local_experts, config.hidden_size, config.intermediate_size
    quantised, encoded = {}, {}
    for name in [name for name in state if name.endswith(("experts.gate_up_proj", "experts.down_proj"))]:
        rows, cols = state[name].shape[2], state[name].shape[1]  # checkpoint blocks hold [E, out, in]
        blocks, scales, values = _quantise((experts, rows, cols), generator)
        quantised |= {name + "_blocks": blocks, name + "_scales": scales}
        encoded[name] = values
        del state[name]
    shuffled = list(state.items()) + list(quantised.items())[::-1]  # a half may arrive before or after its pair
    load_weights(model, shuffled)
    block = model.layers[1].mlp
    assert isinstance(block, SparseMoeBlock)
    gate_up = encoded["model.layers.1.mlp.experts.gate_up_proj"]  # [E, 2I (interleaved), hidden]
    torch.testing.assert_close(block.experts_gate_up_weight[:, :size], gate_up[:, 0::2], atol=0, rtol=0)
    torch.testing.assert_close(block.experts_gate_up_weight[:, size:], gate_up[:, 1::2], atol=0, rtol=0)
    torch.testing.assert_close(block.experts_down_weight, encoded["model.layers.1.mlp.experts.down_proj"],
                               atol=0, rtol=0)
    assert block.experts_down_weight.shape == (experts, hidden, size)
    lonely = [item for item in shuffled if not item[0].endswith("gate_up_proj_scales")]
    with pytest.raises(ValueError, match="missing tensors .*gate_up_proj_blocks"):
        load_weights(model, lonely)


def test_sinks_choose_the_padded_backend_on_cuda_and_refuse_triton(monkeypatch):
    import executor_svc.attention.selection as selection

    monkeypatch.setattr(selection, "_triton_importable", lambda: True)
    cuda = torch.device("cuda")
    assert resolve_backend_name("auto", cuda, head_dim=64, triton_lacks="attention sinks") == "torch_padded"
    assert resolve_backend_name("auto", cuda, head_dim=64) == "triton"
    with pytest.raises(ValueError, match="attention_backend: the triton kernels take no attention sinks"):
        resolve_backend_name("triton", cuda, head_dim=64, triton_lacks="attention sinks")


def test_eagle_drafters_are_refused_for_attention_sinks(tmp_path):
    from executor_svc.drafters.eagle_head import EagleHead

    config = load_hf_config(make_tiny_gpt_oss(tmp_path))
    with pytest.raises(ValueError, match="model_type: EAGLE-style drafters .* attention-sink"):
        EagleHead(config, 64)
