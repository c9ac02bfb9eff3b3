"""The bare-forward baseline: timed on the contexts it is given."""

from __future__ import annotations

import pytest

from client.bench.baselines import measure_bare_decode_forward


def test_bare_forward_runs_a_batch_of_mixed_contexts(tiny_model_dir):
    result = measure_bare_decode_forward(str(tiny_model_dir), 1, [5, 40, 70], repeats=3, warmup=1, query_len=2)
    assert result["batch_size"] == 3 and result["query_len"] == 2
    assert result["context_lens"] == [5, 40, 70]
    assert 0 < result["min_ms"] <= result["median_ms"] <= result["max_ms"]


def test_bare_forward_rejects_an_empty_batch(tiny_model_dir):
    with pytest.raises(ValueError, match="context_lens"):
        measure_bare_decode_forward(str(tiny_model_dir), 1, [])
