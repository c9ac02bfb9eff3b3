"""StepProfiler: step times for a grid of batch sizes x K, and per-position acceptance, through the
runner's own step path, leaving the runner empty."""

from __future__ import annotations

import pytest
from tiny_models import make_tiny_llama

from executor_svc.config import ExecutorConfig
from executor_svc.server import build_runner
from executor_svc.step_profile import StepProfiler


@pytest.fixture(scope="module")
def profiler(tmp_path_factory):
    model_dir = make_tiny_llama(tmp_path_factory.mktemp("target"), seed=3)
    config = ExecutorConfig(model_dir=str(model_dir), num_kv_blocks=200, spec_method="ngram", num_spec_tokens=3)
    runner, description = build_runner(config)
    return StepProfiler(runner, description.num_kv_blocks)


def test_step_times_cover_the_grid_and_leave_no_request_behind(profiler):
    table = profiler.step_times_ms([1, 4], max_k=3, context_len=24, repeats=2)
    assert len(table) == 2 and all(len(row) == 4 for row in table)
    assert all(value > 0 for row in table for value in row)
    assert profiler.runner.requests == {}


def test_acceptance_is_measured_per_position(profiler):
    # A prompt that repeats itself: n-gram drafts follow the repetition, so the first is often accepted.
    rates = profiler.acceptance([[5, 6, 7, 8] * 6, [9, 10, 11] * 8], max_k=3, max_tokens=12)
    assert len(rates) == 3 and all(0.0 <= rate <= 1.0 for rate in rates)
    assert profiler.runner.requests == {}


def test_a_batch_that_does_not_fit_the_cache_is_refused(profiler):
    assert profiler.max_batch_size(64) == 200 // 4
    with pytest.raises(ValueError, match="batch_sizes"):
        profiler.step_times_ms([1000], max_k=1, context_len=64, repeats=1)
    assert profiler.runner.requests == {}
