"""The bare-forward baseline: timed on the contexts it is given."""

from __future__ import annotations

import pytest

from client.bench.baselines import measure_bare_decode_forward


def test_bare_forward_runs_a_batch_of_mixed_contexts(tiny_model_dir):
    result = measure_bare_decode_forward(str(tiny_model_dir), 1, [5, 40, 70], repeats=3, warmup=1, query_len=2)
    assert result["batch_size"] == 3 and result["query_len"] == 2
    assert result["context_lens"] == [5, 40, 70]
    assert 0 < result["min_ms"] <= result["median_ms"] <= result["max_ms"]


def test_a_verify_forward_has_room_for_every_timed_step(tiny_model_dir):
    """Each step adds query_len tokens: the KV cache holds warmup + repeats of them past the prefill (the bench's
    V(K) run at K = 3 ran out of blocks after 163 of 129 + 50 tokens)."""
    result = measure_bare_decode_forward(str(tiny_model_dir), 1, [129], repeats=20, warmup=10, query_len=4)
    assert result["query_len"] == 4 and result["median_ms"] > 0


def test_bare_forward_rejects_an_empty_batch(tiny_model_dir):
    with pytest.raises(ValueError, match="context_lens"):
        measure_bare_decode_forward(str(tiny_model_dir), 1, [])
