"""The weight-read floor: bytes of weights (from the config, in the serving dtype) over measured bandwidth."""

from __future__ import annotations

import json

import pytest
import torch

from client.bench.model_shapes import num_parameters
from client.bench.weight_floor import measure_copy_bandwidth, weight_read_floor

CONFIG = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
          "num_key_value_heads": 2, "vocab_size": 400, "tie_word_embeddings": True}


def test_the_floor_is_weight_bytes_over_bandwidth(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(CONFIG))
    floor = weight_read_floor(str(tmp_path), torch.bfloat16, bandwidth_bytes_s=1e9)
    assert floor["weight_bytes"] == 2 * num_parameters(CONFIG)
    assert floor["floor_ms"] == pytest.approx(1000 * floor["weight_bytes"] / 1e9)
    assert floor["max_tok_s_batch1"] == pytest.approx(1000 / floor["floor_ms"])
    assert weight_read_floor(str(tmp_path), torch.float32, 1e9)["weight_bytes"] == 2 * floor["weight_bytes"]


def test_bandwidth_is_measured_on_the_device():
    assert measure_copy_bandwidth(torch.device("cpu"), num_bytes=1 << 20, repeats=3) > 1e6  # over 1 MB/s


@pytest.mark.parametrize(("num_bytes", "repeats"), [(0, 3), (1024, 0)])
def test_bad_measurement_sizes_are_refused(num_bytes, repeats):
    with pytest.raises(ValueError, match="num_bytes and repeats"):
        measure_copy_bandwidth(torch.device("cpu"), num_bytes, repeats)


def test_a_bandwidth_that_is_not_positive_is_refused(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(CONFIG))
    with pytest.raises(ValueError, match="bandwidth_bytes_s"):
        weight_read_floor(str(tmp_path), torch.float32, 0.0)
