"""Quantised checkpoints dequantised at load (executor_svc/models/quantized_weights.py): scale grids, pairing of
weights with their scales, and the methods refused by name. Whole models against HF: test_llama.py's
``*_fp8_blocks`` and ``*_compressed_tensors_*`` checkpoints."""

from __future__ import annotations

import json

import pytest
import torch
from quantized_checkpoints import fp8_blocks
from tiny_models import make_tiny_llama

from executor_svc.attention.torch_backend import TorchAttentionBackend
from executor_svc.model_loader import load_model
from executor_svc.models.packed_int_weights import PackedIntWeights
from executor_svc.models.quantized_weights import (
    PackedScaledWeights,
    ScaledWeights,
    checkpoint_quantisation,
    dequantise,
    dequantised,
    weight_quantisation,
)

FP8 = ScaledWeights("fp8", "weight_scale_inv", (8, 8))


def _elementwise(values: torch.Tensor, scale: torch.Tensor, block: tuple[int, int]) -> torch.Tensor:
    out = torch.empty(values.shape)
    for row in range(values.shape[0]):
        for col in range(values.shape[1]):
            out[row, col] = values[row, col].float() * scale[row // block[0], col // block[1]]
    return out


def _fp8(rows: int, cols: int, seed: int = 0) -> torch.Tensor:
    return (torch.randn(rows, cols, generator=torch.Generator().manual_seed(seed)) * 50).to(torch.float8_e4m3fn)


def test_partial_last_blocks_take_their_grid_cells_scale():
    """DeepSeek-V3's latent projection has 576 rows in blocks of 128: the last block row is partial."""
    weight, scale = _fp8(20, 12), torch.rand(3, 2) + 0.5
    torch.testing.assert_close(dequantise(weight, scale, FP8, "w"), _elementwise(weight, scale, (8, 8)),
                               rtol=0, atol=0)


@pytest.mark.parametrize(("scale_shape", "block"), [((), (6, 10)), ((1,), (6, 10)), ((6,), (1, 10)),
                                                    ((6, 1), (1, 10)), ((6, 5), (1, 2)), ((3, 5), (2, 2))])
def test_tensor_channel_group_and_unconfigured_block_scales(scale_shape, block):
    weight = _fp8(6, 10)
    scale = torch.rand(scale_shape) + 0.5
    grid = scale.reshape(6, 1) if scale_shape == (6,) else scale.reshape(1, 1) if scale.numel() == 1 else scale
    quantisation = ScaledWeights("compressed-tensors", "weight_scale", None, integer_weights=True)
    torch.testing.assert_close(dequantise(weight, scale, quantisation, "w"), _elementwise(weight, grid, block),
                               rtol=0, atol=0)


def test_stacked_experts_are_dequantised_one_grid_each():
    weight = torch.stack([_fp8(8, 8, seed) for seed in range(3)])
    scale = torch.rand(3, 2, 1) + 0.5
    quantisation = ScaledWeights("fp8", "weight_scale_inv", (4, 8))
    got = dequantise(weight, scale, quantisation, "experts.gate_up_proj")
    for expert in range(3):
        torch.testing.assert_close(got[expert], _elementwise(weight[expert], scale[expert], (4, 8)), rtol=0, atol=0)


def test_ue8m0_scale_bytes_are_powers_of_two():
    weight, exponents = _fp8(8, 8), torch.tensor([[120, 130]], dtype=torch.uint8)
    quantisation = ScaledWeights("fp8", "weight_scale_inv", (8, 4), exponent_scales=True)
    expected = _elementwise(weight, torch.tensor([[2.0 ** -7, 2.0 ** 3]]), (8, 4))
    torch.testing.assert_close(dequantise(weight, exponents, quantisation, "w"), expected, rtol=0, atol=0)


def test_int8_values_are_weights_only_where_the_format_says_so():
    weight, scale = torch.randint(-127, 128, (4, 4), dtype=torch.int8), torch.rand(4, 1)
    ints = ScaledWeights("compressed-tensors", "weight_scale", integer_weights=True)
    torch.testing.assert_close(dequantise(weight, scale, ints, "w"), weight.float() * scale, rtol=0, atol=0)
    with pytest.raises(ValueError, match="'w' holds bytes .*4-bit weights are not served"):
        dequantise(weight, scale, FP8, "w")


def test_a_grid_that_does_not_cover_the_weight_is_refused_naming_it():
    with pytest.raises(ValueError, match=r"'layer.w' of shape \[20, 12\] does not divide into its weight_scale_inv "
                                         r"grid \[3, 5\] of \[8, 8\] blocks"):
        dequantise(_fp8(20, 12), torch.ones(3, 5), FP8, "layer.w")
    with pytest.raises(ValueError, match="has a weight_scale_inv of shape"):
        dequantise(_fp8(8, 8), torch.ones(2, 1, 1), FP8, "w")


def test_weights_meet_their_scales_in_either_order_and_activation_scales_are_dropped():
    a, b = _fp8(8, 8, 1), _fp8(8, 8, 2)
    scale_a, scale_b = torch.full((1, 1), 2.0), torch.full((1, 1), 3.0)
    norm = torch.ones(8)
    stream = [("a.weight", a), ("b.weight_scale_inv", scale_b), ("norm.weight", norm), ("a.weight_scale_inv", scale_a),
              ("a.input_scale", torch.ones(1)), ("b.activation_scale", torch.ones(1)), ("b.weight", b)]
    got = dict(dequantised(stream, FP8))
    assert list(got) == ["norm.weight", "a.weight", "b.weight"]
    assert torch.equal(got["a.weight"], a.float() * 2.0) and torch.equal(got["b.weight"], b.float() * 3.0)
    assert got["norm.weight"] is norm


def test_a_weight_without_its_scale_or_a_scale_without_its_weight_is_named():
    with pytest.raises(ValueError, match=r"'a' has \['weight'\] of its fp8 weight but no weight_scale_inv"):
        list(dequantised([("a.weight", _fp8(8, 8))], FP8))
    with pytest.raises(ValueError, match=r"'b' has \['weight_scale_inv'\] of its fp8 weight but no weight"):
        list(dequantised([("b.weight_scale_inv", torch.ones(1, 1))], FP8))
    awq = weight_quantisation({"quant_method": "awq", "bits": 4, "group_size": 8}, "llama")
    with pytest.raises(ValueError, match=r"'m' has \['qweight', 'scales'\] of its awq weight but no qzeros"):
        list(dequantised([("m.qweight", torch.zeros(8, 1, dtype=torch.int32)), ("m.scales", torch.ones(1, 8))], awq))


def test_quantised_values_no_scale_applies_to_are_refused_not_copied():
    """Llama 4 Maverick's FP8 release stacks its experts' FP8 values under other names; an FP8 tensor in a checkpoint
    that declares no quantisation: either would load without its scale."""
    with pytest.raises(ValueError, match=r"'experts.gate_up_proj' holds torch.float8_e4m3fn values that no scale of "
                                         r"fp8 applies to"):
        list(dequantised([("experts.gate_up_proj", _fp8(8, 8))], FP8))
    with pytest.raises(ValueError, match=r"'a.weight' holds torch.int8 values that no scale of an unquantised"):
        list(dequantised([("a.weight", torch.zeros(2, 2, dtype=torch.int8))], None))
    plain = [("a.weight", torch.ones(2, 2)), ("a.input_scale", torch.ones(1))]
    assert [name for name, _ in dequantised(plain, None)] == ["a.weight", "a.input_scale"]  # nothing dropped


def test_served_methods_and_their_settings():
    fp8 = weight_quantisation({"quant_method": "fp8", "weight_block_size": [128, 128], "scale_fmt": "ue8m0"}, "x")
    assert fp8 == ScaledWeights("fp8", "weight_scale_inv", (128, 128), exponent_scales=True)
    assert weight_quantisation({"quant_method": "fbgemm_fp8"}, "llama") == ScaledWeights("fbgemm_fp8",
                                                                                               "weight_scale")
    block = {"num_bits": 8, "type": "float", "strategy": "block", "symmetric": True, "block_structure": [64, 32]}
    settings = {"quant_method": "compressed-tensors", "format": "float-quantized",
                "config_groups": {"group_0": {"weights": block}}}
    assert weight_quantisation(settings, "qwen3").block == (64, 32)
    assert weight_quantisation({"quant_method": "mxfp4"}, "gpt_oss") is None  # gpt_oss_weights.py unpacks it
    gptq = weight_quantisation({"quant_method": "gptq", "bits": 8, "group_size": -1, "desc_act": True}, "qwen3")
    assert gptq == PackedIntWeights("gptq", 8, None, act_order=True, zeros_minus_one=True)
    assert gptq.parts == ("qweight", "qzeros", "scales", "g_idx") and gptq.dropped == ()
    awq = weight_quantisation({"quant_method": "awq", "w_bit": 4, "q_group_size": 128, "version": "GEMM"}, "llama")
    assert awq == PackedIntWeights("awq", 4, 128, awq_order=True) and awq.dropped == ("g_idx",)


@pytest.mark.parametrize(("settings", "message"), [
    ({"quant_method": "bitsandbytes"}, r"quant_method: 'bitsandbytes' checkpoints are not served"),
    ({"quant_method": "hqq"}, r"quant_method: 'hqq'"),
    ({"quant_method": "gptq", "bits": 3}, r"bits: GPTQ checkpoints of 2, 4, 8 bits are served, got 3"),
    ({"quant_method": "gptq", "bits": 4, "checkpoint_format": "marlin"}, r"checkpoint_format: 'marlin' is not served"),
    ({"quant_method": "gptq", "bits": 4, "group_size": 0}, r"group_size: must be a positive integer or -1, got 0"),
    ({"quant_method": "awq", "bits": 8}, r"bits: AWQ checkpoints of 4 bits are served, got 8"),
    ({"quant_method": "awq", "bits": 4, "version": "gemv"}, r"version: AWQ's 'gemv' layout is not served"),
    ({"quant_method": "awq", "bits": 4, "zero_point": False}, r"zero_point: AWQ without zero points"),
    ({"quant_method": "mxfp4"}, r"quant_method: 'mxfp4'"),  # a Llama does not carry GPT-OSS's experts
    ({"quant_method": "fp8", "weight_block_size": [128]}, r"weight_block_size: must be two positive integers"),
    ({"quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized"}, r"format: compressed-tensors "
                                                                               r"'nvfp4-pack-quantized' is not served"),
    ({"quant_method": "compressed-tensors", "format": "float-quantized",
      "config_groups": {"g": {"weights": {"num_bits": 4, "type": "int"}}}},
     r"config_groups.g.weights: float-quantized serves 8-bit float or int weights, got 4-bit int"),
    ({"quant_method": "compressed-tensors", "format": "pack-quantized",
      "config_groups": {"g": {"weights": {"num_bits": 3, "type": "int"}}}},
     r"config_groups.g.weights: pack-quantized serves 4 or 8-bit int weights, got 3-bit int"),
    ({"quant_method": "compressed-tensors", "format": "pack-quantized",
      "config_groups": {"g": {"weights": {"num_bits": 4, "type": "int", "strategy": "group", "actorder": "group"}}}},
     r"weights.actorder: group act order"),
    ({"quant_method": "compressed-tensors", "format": "int-quantized",
      "config_groups": {"g": {"weights": {"num_bits": 8, "type": "int", "symmetric": False}}}},
     r"weights.symmetric: asymmetric weights"),
    ({"quant_method": "compressed-tensors", "format": "int-quantized",
      "config_groups": {"g": {"weights": {"num_bits": 8, "type": "int", "strategy": "token"}}}},
     r"weights.strategy: 'token' is not served"),
])
def test_methods_that_are_not_served_are_refused_by_field(settings, message):
    with pytest.raises(ValueError, match=message):
        weight_quantisation(settings, "llama")


def test_loading_refuses_an_unserved_method_before_reading_weights(tmp_path):
    checkpoint = make_tiny_llama(tmp_path / "bnb", seed=2)
    config = json.loads((checkpoint / "config.json").read_text())
    settings = {"quant_method": "bitsandbytes", "load_in_4bit": True}
    (checkpoint / "config.json").write_text(json.dumps({**config, "quantization_config": settings}))
    (checkpoint / "model.safetensors").write_bytes(b"not read")
    with pytest.raises(ValueError, match="quant_method: 'bitsandbytes' checkpoints are not served"):
        load_model(checkpoint, torch.float32, "cpu", TorchAttentionBackend())


def test_an_fp8_checkpoint_loads_in_bf16_as_hf_dequantises_it(tmp_path):
    """The float32 product is cast to the serving dtype once, as transformers casts its dequantised weight."""
    quantised = fp8_blocks(make_tiny_llama(tmp_path / "source", seed=4), tmp_path / "fp8", (16, 16))
    assert checkpoint_quantisation(quantised) == ScaledWeights("fp8", "weight_scale_inv", (16, 16))
    model = load_model(quantised, torch.bfloat16, "cpu", TorchAttentionBackend())
    reference = load_model(quantised / "reference", torch.bfloat16, "cpu", TorchAttentionBackend())
    for (name, ours), (_, theirs) in zip(model.named_parameters(), reference.named_parameters()):
        assert torch.equal(ours, theirs), name


def test_packed_integers_unpack_in_each_formats_order():
    """One word per format, fields written out by hand: GPTQ rows (lowest bits: row 0), AWQ columns 0 2 4 6 1 3 5 7."""
    word = torch.tensor([[0x76543210]], dtype=torch.int32)  # fields 0..7, lowest first
    ones = torch.ones(1, 8)
    gptq = PackedIntWeights("gptq", 4, None)
    weight = gptq.dequantise_parts({"qweight": word.expand(1, 8).contiguous(), "qzeros": torch.zeros(1, 1,
                                    dtype=torch.int32), "scales": ones}, "w")
    assert weight.shape == (8, 8) and weight[3].tolist() == [0, 1, 2, 3, 4, 5, 6, 7]  # [out, in]: input i = field i
    awq = PackedIntWeights("awq", 4, None, awq_order=True)
    weight = awq.dequantise_parts({"qweight": word, "qzeros": torch.zeros(1, 1, dtype=torch.int32), "scales": ones},
                                  "w")
    assert weight[:, 0].tolist() == [0, 4, 1, 5, 2, 6, 3, 7]  # column order[i] holds field i


def test_gptq_zero_points_are_stored_minus_one_except_in_gptq_v2_and_top_bits_read_unsigned():
    word = torch.tensor([[-1]], dtype=torch.int32)  # every field 15
    parts = {"qweight": word.expand(1, 8).contiguous(), "qzeros": torch.full((1, 1), 0x22222222, dtype=torch.int32),
             "scales": torch.full((1, 8), 0.5)}
    stored_minus_one = PackedIntWeights("gptq", 4, None, zeros_minus_one=True)
    assert stored_minus_one.dequantise_parts(parts, "w").unique().tolist() == [6.0]  # (15 - (2 + 1)) / 2
    assert PackedIntWeights("gptq", 4, None).dequantise_parts(parts, "w").unique().tolist() == [6.5]  # (15 - 2) / 2


def test_packed_parts_that_disagree_are_refused_naming_the_module():
    gptq = PackedIntWeights("gptq", 4, 8)
    parts = {"qweight": torch.zeros(2, 8, dtype=torch.int32), "qzeros": torch.zeros(2, 1, dtype=torch.int32),
             "scales": torch.ones(2, 16)}
    with pytest.raises(ValueError, match=r"'m.weight': qweight unpacks to \[16, 8\] but qzeros to \[2, 8\] and "
                                         r"scales are \[2, 16\]"):
        gptq.dequantise_parts(parts, "m.weight")
    with pytest.raises(ValueError, match="qweight and qzeros must be int32 words"):
        gptq.dequantise_parts({**parts, "qweight": torch.zeros(2, 8, dtype=torch.int64)}, "m.weight")
    with pytest.raises(ValueError, match="g_idx must hold a group >= 0 for each of 16 input rows"):
        PackedIntWeights("gptq", 4, 8, act_order=True).dequantise_parts(
            {**parts, "scales": torch.ones(2, 8), "g_idx": torch.zeros(15, dtype=torch.int32)}, "m.weight")


@pytest.mark.parametrize("bits", [4, 8])
def test_compressed_tensors_packed_integers_are_signed_fields_along_each_row(bits):
    per_word = 32 // bits
    values = torch.arange(2 * per_word).reshape(2, per_word) % (1 << bits) - (1 << (bits - 1))  # every value once
    word_of = [sum((int(v) + (1 << (bits - 1))) << (bits * i) for i, v in enumerate(row)) for row in values.tolist()]
    words = torch.tensor([[w - (1 << 32) if w >= 1 << 31 else w] for w in word_of], dtype=torch.int32)
    scale = torch.tensor([[0.5], [2.0]])
    parts = {"weight_packed": words, "weight_scale": scale, "weight_shape": torch.tensor([2, per_word - 1])}
    weight = PackedScaledWeights(bits).dequantise_parts(parts, "w")
    torch.testing.assert_close(weight, values[:, : per_word - 1].float() * scale, rtol=0, atol=0)  # shape's columns
    with pytest.raises(ValueError, match=r"'w': weight_packed \[2, 1\] \(torch.int32\) does not hold weight_shape "
                                         r"\[2, 64\]"):
        PackedScaledWeights(bits).dequantise_parts({**parts, "weight_shape": torch.tensor([2, 64])}, "w")
    settings = {"quant_method": "compressed-tensors", "format": "pack-quantized",
                "config_groups": {"g": {"weights": {"num_bits": bits, "type": "int", "strategy": "group"}}}}
    assert weight_quantisation(settings, "llama") == PackedScaledWeights(bits)
