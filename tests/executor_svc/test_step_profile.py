"""StepProfiler: step times for a grid of batch sizes x K, and per-position acceptance, through the
runner's own step path, leaving the runner empty."""

from __future__ import annotations

import pytest
from tiny_models import make_tiny_llama

from executor_svc import step_profile
from executor_svc.config import ExecutorConfig
from executor_svc.drafters.eagle_ngram import EagleNgramDrafter
from executor_svc.drafters.ngram import NgramDrafter
from executor_svc.server import build_runner
from executor_svc.step_profile import StepProfiler, column_times, cycle_order, timing_contexts


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


@pytest.mark.parametrize(("budget_s", "timed_cycles"), [(0.0, step_profile.MIN_CYCLES), (1e9, 5)])
def test_cycles_stop_at_the_batch_budget_but_not_before_the_minimum(profiler, monkeypatch, budget_s, timed_cycles):
    monkeypatch.setattr(step_profile, "BATCH_BUDGET_S", budget_s)
    steps = []
    execute = profiler.runner.execute
    monkeypatch.setattr(profiler.runner, "execute", lambda step: steps.append(step) or execute(step))
    profiler.step_times_ms([2], max_k=3, context_len=24, repeats=5)
    assert len(steps) == 1 + (1 + timed_cycles) * 4  # the prefill, the warm-up cycle, the timed cycles


def test_only_the_first_batch_size_warms_every_k_up(profiler, monkeypatch):
    monkeypatch.setattr(step_profile, "BATCH_BUDGET_S", 0.0)
    steps = []
    execute = profiler.runner.execute
    monkeypatch.setattr(profiler.runner, "execute", lambda step: steps.append(step) or execute(step))
    profiler.step_times_ms([1, 2], max_k=3, context_len=24, repeats=5)
    sizes = [len(step.new_requests) or len(step.cached_requests) for step in steps]
    timed = [2] * (step_profile.MIN_CYCLES * 4)
    # Batch 1: prefill, a warm-up cycle, the timed cycles; batch 2: prefill, one warm-up step, the timed cycles.
    assert sizes == [1] * (1 + 4 + step_profile.MIN_CYCLES * 4) + [2, 2] + timed
    assert steps[1 + 4 + step_profile.MIN_CYCLES * 4 + 1].cached_requests[0].num_draft_tokens == 3


def test_timed_requests_read_the_given_texts(profiler, monkeypatch):
    steps = []
    execute = profiler.runner.execute
    monkeypatch.setattr(profiler.runner, "execute", lambda step: steps.append(step) or execute(step))
    texts = [list(range(40, 80)), list(range(100, 110))]
    profiler.step_times_ms([3], max_k=2, context_len=24, repeats=1, texts=texts)
    prompts = [list(new.prompt_token_ids) for new in steps[0].new_requests]
    assert prompts == [list(range(56, 80)), list(range(100, 110)), list(range(56, 80))]
    assert profiler.runner.requests == {}


def test_eagle_ngram_is_timed_drafting_with_its_head_alone_and_measures_acceptance_whole(profiler, monkeypatch):
    head_stand_in = profiler.runner.drafter  # any drafter serves as the head here
    drafters = []
    execute = profiler.runner.execute
    monkeypatch.setattr(profiler.runner, "execute",
                        lambda step: drafters.append(profiler.runner.drafter) or execute(step))
    profiler.step_times_ms([1], max_k=2, context_len=16, repeats=1)
    assert drafters and all(drafter is head_stand_in for drafter in drafters)  # n-gram lookup: timed as itself
    hybrid = EagleNgramDrafter(head_stand_in, NgramDrafter(2, 4))
    monkeypatch.setattr(profiler.runner, "drafter", hybrid)
    drafters.clear()
    profiler.step_times_ms([1, 2], max_k=2, context_len=16, repeats=1)
    assert drafters and all(drafter is head_stand_in for drafter in drafters)
    assert profiler.runner.drafter is hybrid and profiler.runner.requests == {}
    drafters.clear()
    profiler.acceptance([[5, 6, 7, 8] * 4], max_k=2, max_tokens=4)
    assert drafters and all(drafter is hybrid for drafter in drafters)


def test_timing_contexts_end_where_each_text_ends_and_take_turns():
    texts = [[1, 2, 3, 4, 5], [6, 7], []]
    assert timing_contexts(texts, 3, context_len=3) == [[3, 4, 5], [6, 7], [3, 4, 5]]


@pytest.mark.parametrize("texts", [None, [], [[]]])
def test_without_texts_every_timed_request_gets_the_synthetic_context(texts):
    contexts = timing_contexts(texts, 2, context_len=5)
    assert len(contexts) == 2 and contexts[0] == contexts[1] and len(contexts[0]) == 5


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


def test_cycles_run_every_k_once_in_alternating_order():
    assert [cycle_order(cycle, 3) for cycle in range(3)] == [[0, 1, 2, 3], [3, 2, 1, 0], [0, 1, 2, 3]]


def test_a_slow_spell_over_whole_cycles_cancels_out():
    # True costs 50 / 55 / 70 ms; cycles 2-4 ran 1.5x slower (another job on the machine). Timed column
    # after column, K = 2 would have caught the slow spell alone; per-cycle ratios do not care.
    cycles = [[50.0 * f, 55.0 * f, 70.0 * f] for f in (1.0, 1.0, 1.5, 1.5, 1.5)]
    assert column_times(cycles) == pytest.approx([75.0, 82.5, 105.0])
    assert column_times(cycles)[1] / column_times(cycles)[0] == pytest.approx(1.1)


def test_one_spike_in_a_cycle_does_not_move_the_estimate():
    cycles = [[50.0, 55.0], [50.0, 55.0], [50.0, 400.0], [50.0, 55.0], [300.0, 55.0]]
    assert column_times(cycles) == pytest.approx([50.0, 55.0])


def test_no_cycle_is_an_error_naming_the_field():
    with pytest.raises(ValueError, match="repeats"):
        column_times([])
