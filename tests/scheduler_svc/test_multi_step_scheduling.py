"""Scheduler multi-step: pure decode steps get n sub-steps, KV slots for all of them, n lowered when blocks
are short, placeholders settled per sub-step and the rest when the step closes."""

from __future__ import annotations

from test_scheduler import make_request

from scheduler_svc.block_manager import KVBlockManager
from scheduler_svc.config import SchedulingConfig
from scheduler_svc.scheduler import Scheduler


def make_scheduler(num_steps: int, num_blocks: int = 64) -> Scheduler:
    config = SchedulingConfig(num_scheduler_steps=num_steps)
    return Scheduler(config, KVBlockManager(num_blocks, 16), max_model_len=4096)


def prefilled(scheduler: Scheduler, prompt_len: int = 15, max_tokens: int = 40) -> None:
    scheduler.add_request(make_request("a", prompt_len, max_tokens))
    first = scheduler.schedule()
    assert first.num_steps == 1  # a prefill never repeats
    scheduler.accept_result(first, "a").output_token_ids.append(7)
    scheduler.close_step(first)


def test_a_pure_decode_step_runs_n_sub_steps_with_slots_for_all():
    scheduler = make_scheduler(4)
    prefilled(scheduler)
    step = scheduler.schedule()
    request = scheduler.requests["a"]
    assert step.num_steps == 4
    assert request.num_output_placeholders == 4 and request.num_computed_tokens == 19
    assert len(scheduler.block_manager.block_ids("a")) * 16 >= 19
    for sub_step in range(4):
        scheduler.accept_result(step, "a", sub_step=sub_step).output_token_ids.append(7)
    scheduler.close_step(step)
    assert request.num_output_placeholders == 0 and request.num_computed_tokens == request.num_tokens - 1


def test_n_is_lowered_when_blocks_are_short():
    scheduler = make_scheduler(8, num_blocks=2)  # 32 slots: prompt 15 + 1 output leaves room for 16 more
    prefilled(scheduler, prompt_len=15)
    assert scheduler.schedule().num_steps == 8
    scheduler = make_scheduler(8, num_blocks=1)  # 16 slots: only the first sub-step fits
    prefilled(scheduler, prompt_len=15)
    step = scheduler.schedule()
    assert step.num_steps == 1 and scheduler.num_preemptions == 0


def test_sub_steps_stop_at_max_tokens_and_unrun_ones_are_settled_at_close():
    scheduler = make_scheduler(8)
    prefilled(scheduler, max_tokens=3)
    step = scheduler.schedule()
    request = scheduler.requests["a"]
    assert step.num_steps == 8 and request.num_output_placeholders == 2  # outputs 2 and 3 only
    scheduler.accept_result(step, "a", sub_step=0).output_token_ids.append(7)
    scheduler.close_step(step)  # the executor skipped the rest (say it stopped the request)
    assert request.num_output_placeholders == 0 and request.num_computed_tokens == request.num_tokens - 1


def test_a_result_after_finish_is_dropped():
    scheduler = make_scheduler(4)
    prefilled(scheduler)
    step = scheduler.schedule()
    scheduler.finish_request("a")
    assert scheduler.accept_result(step, "a", sub_step=2) is None
    assert scheduler.block_manager.num_free_blocks == 64
